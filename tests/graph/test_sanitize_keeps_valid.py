"""sanitize never breaks a valid model: a pass that would is undone for that model, with its reason.

Each model here passes onnx.checker (full check) and loads in ONNX Runtime. The
first ones were rejected by sanitize before passes were checked ("model ... is
not a valid ONNX graph"): onnx-graphsurgeon 0.6.1 inlines an If whose condition
is constant and, when the chosen branch returns one of its own initializers,
leaves the If's output without a producer. In the main graph an earlier check
caught it; inside another If's branch or a Loop body nothing did.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.stages.sanitize import SanitizeModel

X = graphs.float_input("x", [2])
COND = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])


def _inner_if(output: str) -> onnx.NodeProto:
    """If(c_in=True): then returns its own initializer [5, 6], else x (the shape gs loses on inlining)."""
    then_branch = helper.make_graph([], "then_const", [], [graphs.float_input("k", [2])],
                                    [numpy_helper.from_array(np.float32([5, 6]), "k")])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else_x", [],
                                    [graphs.float_input("e_out", [2])])
    return helper.make_node("If", ["c_in"], [output], name="inner_if", then_branch=then_branch,
                            else_branch=else_branch)


def _c_in() -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(True), "c_in")


def nested_if_model() -> onnx.ModelProto:
    """y = cond ? inner_if * x : -x, the constant-condition If inside the outer If's then branch."""
    outer_then = helper.make_graph([_inner_if("iv"), helper.make_node("Mul", ["iv", "x"], ["t_out"], name="mul")],
                                   "outer_then", [], [graphs.float_input("t_out", [2])], [_c_in()])
    outer_else = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out2"], name="neg")], "outer_else", [],
                                   [graphs.float_input("e_out2", [2])])
    node = helper.make_node("If", ["cond"], ["y"], name="outer_if", then_branch=outer_then, else_branch=outer_else)
    return graphs.make_model([node], [X, COND], [graphs.float_input("y", [2])])


def loop_model() -> onnx.ModelProto:
    """y = x + 3 * [5, 6]: a Loop whose body holds the constant-condition If."""
    body = helper.make_graph(
        [_inner_if("iv"), helper.make_node("Add", ["acc_in", "iv"], ["acc_out"], name="acc"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), graphs.float_input("acc_in", [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), graphs.float_input("acc_out", [2])],
        [_c_in()],
    )
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    node = helper.make_node("Loop", ["trip", "", "x"], ["y"], name="loop", body=body)
    return graphs.make_model([node], [X], [graphs.float_input("y", [2])], [trip])


def outer_tensor_used_only_in_a_branch() -> onnx.ModelProto:
    """The If is listed before the Relu whose output only its branch reads (an implicit input)."""
    then_branch = helper.make_graph([helper.make_node("Mul", ["x", "r"], ["t_out"])], "t", [],
                                    [graphs.float_input("t_out", [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "e", [],
                                    [graphs.float_input("e_out", [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch)]
    return graphs.make_model(nodes, [X, COND], [graphs.float_input("y", [2])])


def _feeds_sets(model: onnx.ModelProto) -> list[dict]:
    x = np.float32([1.5, -2.0])
    if any(value.name == "cond" for value in model.graph.input):
        return [{"x": x, "cond": np.array(flag)} for flag in (True, False)]
    return [{"x": x}]


@pytest.mark.parametrize("build", [nested_if_model, loop_model], ids=["nested_if", "loop_body"])
def test_folding_that_breaks_a_subgraph_is_undone_and_the_model_still_computes_the_same(tmp_path, build):
    model = build()
    onnx.checker.check_model(model, full_check=True)  # a valid model, as the premise says
    save_model(model, tmp_path / "in.onnx")

    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")

    assert [undone["pass"] for undone in report["undone"]] == ["constant folding"]
    assert "onnx.checker" in report["undone"][0]["reason"] and "'iv'" in report["undone"][0]["reason"]
    assert any(w.startswith("constant folding was undone for this model") for w in report["warnings"])
    out = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(out, full_check=True)
    for feeds in _feeds_sets(model):
        np.testing.assert_array_equal(graphs.run(out, feeds)[0], graphs.run(model, feeds)[0])


def test_the_stage_line_names_the_undone_pass_and_its_whole_reason(tmp_path):
    save_model(loop_model(), tmp_path / "in.onnx")
    (tmp_path / "out").mkdir()
    outcome = SanitizeModel().run({"model": tmp_path / "in.onnx"}, {}, tmp_path / "out")
    reason = outcome.details["undone"][0]["reason"]
    assert f"constant folding undone for this model ({reason})" in outcome.summary
    assert "Context: Bad node spec for node. Name: loop OpType: Loop (the model as given passes)" in reason  # whole


def test_an_outer_tensor_read_only_by_a_branch_survives_cleanup_and_sort(tmp_path):
    model = outer_tensor_used_only_in_a_branch()
    onnx.checker.check_model(model, full_check=True)
    save_model(model, tmp_path / "in.onnx")
    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert report["undone"] == []
    out = onnx.load(str(tmp_path / "out.onnx"))
    assert [node.op_type for node in out.graph.node] == ["Relu", "If"]
    onnx.checker.check_model(out, full_check=True)
    for feeds in _feeds_sets(model):
        np.testing.assert_array_equal(graphs.run(out, feeds)[0], graphs.run(model, feeds)[0])


def test_an_invalid_source_is_refused_with_the_checkers_whole_message(tmp_path):
    missing = "tensor_" + "that_no_node_produces_" * 12  # a name far longer than any old cut-off (200)
    model = graphs.make_model([helper.make_node("Add", ["x", missing], ["y"], name="add")], [X],
                              [graphs.float_input("y", [2])])
    save_model(model, tmp_path / "in.onnx")
    with pytest.raises(UserError) as error:
        sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    message = str(error.value)
    assert "is not a valid ONNX graph (onnx.checker on that file:" in message
    assert missing in message and "\n" not in message
    assert f"onnx.checker.check_model('{tmp_path / 'in.onnx'}')" in message


def test_a_cycle_is_refused_as_the_users_model_not_a_crash(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Identity", ["a"], ["y"], name="out")]
    save_model(graphs.make_model(nodes, [X], [graphs.float_input("y", [2])]), tmp_path / "in.onnx")
    with pytest.raises(UserError, match="is not a valid ONNX graph .*Cycle detected in graph"):
        sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")


def test_a_model_onnx_runtime_cannot_load_is_not_required_to_load_afterwards(tmp_path):
    # A TensorRT plugin's op: no ONNX Runtime kernel, no ONNX schema; sanitize must still run.
    nodes = [helper.make_node("Add", ["x", "two"], ["x2"], name="add"),
             helper.make_node("MyPlugin", ["x2"], ["y"], name="plugin", domain="trt.plugins")]
    model = graphs.make_model(nodes, [X], [graphs.float_input("y", [2])],
                              [numpy_helper.from_array(np.float32([2, 2]), "two")])
    model.opset_import.append(helper.make_opsetid("trt.plugins", 1))
    save_model(model, tmp_path / "in.onnx")
    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert report["undone"] == []
    assert [node.op_type for node in onnx.load(str(tmp_path / "out.onnx")).graph.node] == ["Add", "MyPlugin"]


def test_a_stale_value_info_in_a_branch_is_derived_again(tmp_path):
    # The branch says Relu's output has 7 elements; it has 2. ONNX Runtime runs the model, the
    # plain checker passes, the full check refuses it ("existing shape differ"): sanitize now
    # derives body shapes afresh, as it does for the main graph, instead of keeping the stale one.
    then_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["t_out"])],
                                    "t", [], [graphs.float_input("t_out", [2])], value_info=[graphs.float_input("r", [7])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "e", [],
                                    [graphs.float_input("e_out", [2])])
    node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch)
    model = graphs.make_model([node], [X, COND], [graphs.float_input("y", [2])])
    with pytest.raises(Exception, match="existing shape differ"):
        onnx.checker.check_model(model, full_check=True)
    save_model(model, tmp_path / "in.onnx")
    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    out = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(out, full_check=True)
    assert report["value_info_stripped"] >= 1 and report["undone"] == []
    for feeds in _feeds_sets(model):
        np.testing.assert_array_equal(graphs.run(out, feeds)[0], graphs.run(model, feeds)[0])
