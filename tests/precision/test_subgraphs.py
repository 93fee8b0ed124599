"""If/Loop/Scan bodies are first-class: indexed, ruled, measured, materialised, emulated, reported."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.graphs import element_types, run
from tests.precision.models import precision_config
from tests.precision.subgraph_graphs import feeds_for, if_inside_loop, if_matmul, loop_carried, lstm_in_if, scan_rnn
from trtpipe.errors import UserError
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.names_table import write_names_table
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.plan_document import plan_document
from trtpipe.precision.plan.planner import plan_precision

FP16, FP32 = TensorProto.FLOAT16, TensorProto.FLOAT


def named(model):
    name_nodes_as_parser_does(model)
    return model, network_from_model(model)


def planned(model, feeds, **config):
    model, net = named(model)
    decisions, matches = plan_precision(net, precision_config(**config), [feeds])
    mixed, report = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()})
    onnx.checker.check_model(mixed, full_check=True)
    return net, decisions, plan_document(net, decisions, matches, "fp16", report), mixed


def body(model, control, attribute="body"):
    node = next(n for n in model.graph.node if n.name == control)
    return next(a.g for a in node.attribute if a.name == attribute)


# --- the network ---------------------------------------------------------------------------------

def test_body_nodes_are_indexed_with_where_they_live_before_their_control_node():
    _, net = named(if_matmul())
    assert net.names == ["pre", "branch/else_branch/mm", "branch/else_branch/scale", "branch/else_branch/act",
                         "branch/then_branch/mm", "branch/then_branch/act", "branch", "post"]
    assert net.parent["branch/then_branch/mm"] == "branch" and "pre" not in net.parent
    assert set(net.bodies["branch"]) == {n for n in net.names if n.startswith("branch/")}
    # Outer-scope tensors read inside a body list the body nodes as consumers (implicit inputs).
    assert net.consumers["h"] == ["branch/else_branch/mm", "branch/then_branch/mm"]
    assert net.consumers["Wa"] == ["branch/then_branch/mm"]
    assert net.producer["e2"] == "branch/else_branch/scale" and net.tensor_types["e2"] == FP32
    assert net.tensor_shapes["t1"] == [None, 4] and "Wb" in net.constants


def test_naming_is_written_into_the_model_once_and_is_stable():
    model, _ = named(loop_carried())
    assert [n.name for n in body(model, "steps").node][:3] == ["steps/body/mm", "steps/body/add", "steps/body/act"]
    again = onnx.ModelProto()
    again.CopyFrom(model)
    assert name_nodes_as_parser_does(again) == 0


def test_tensor_names_two_branches_share_are_made_unique():
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["o"], name="neg")], "b", [],
                               [helper.make_tensor_value_info("o", FP32, [2])])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("x", FP32, [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FP32, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    model, net = named(model)
    outputs = [g.node[0].output[0] for g in list(all_graphs(model.graph))[1:]]
    assert sorted(outputs) == ["o", "o_1"] and {net.producer[o] for o in outputs} == {
        "if/else_branch/neg", "if/then_branch/neg"}
    onnx.checker.check_model(model, full_check=True)
    feeds = {"x": np.array([1.0, -2.0], np.float32), "c": np.array(False)}
    assert run(model, feeds)[0].tolist() == [-1.0, 2.0]


def test_a_renamed_branch_tensor_never_takes_a_name_a_later_scope_defines():
    # Regression (silero_vad_op18_ifless, PyTorch 2.9's exporter): both branches define `w` and the
    # then branch (renamed second: attributes are sorted) also defines `w_1`; renaming the second `w` to `w_1` made ONNX Runtime refuse the
    # model ("initializer name is not unique").
    def branch(name, extra):
        inits = [numpy_helper.from_array(np.full(2, 2.0, np.float32), "w")]
        nodes = [helper.make_node("Mul", ["x", "w"], [f"{name}_o"], name=f"{name}_mul")]
        if extra:
            inits.append(numpy_helper.from_array(np.full(2, 3.0, np.float32), "w_1"))
            nodes = [helper.make_node("Mul", ["x", "w"], ["t"], name="m0"),
                     helper.make_node("Mul", ["t", "w_1"], [f"{name}_o"], name=f"{name}_mul")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_o", FP32, [2])], inits)

    model = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("a", True), else_branch=branch("b", False))],
        "g", [helper.make_tensor_value_info("x", FP32, [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FP32, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    model, _ = named(model)
    names = [t.name for g in all_graphs(model.graph) for t in g.initializer]
    assert len(names) == len(set(names)) == 3
    feeds = {"x": np.array([1.0, -2.0], np.float32)}
    assert run(model, {**feeds, "c": np.array(True)})[0].tolist() == [6.0, -12.0]
    assert run(model, {**feeds, "c": np.array(False)})[0].tolist() == [2.0, -4.0]


# --- rules -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, expected", [
    ({"match": "exact", "pattern": "branch/then_branch/mm"}, ["branch/then_branch/mm"]),
    ({"match": "regex", "pattern": "branch/.*_branch/mm"}, ["branch/else_branch/mm", "branch/then_branch/mm"]),
    ({"match": "op_type", "pattern": "MatMul"}, ["pre", "branch/else_branch/mm", "branch/then_branch/mm"]),
    ({"match": "exact", "pattern": "branch"}, ["branch", "branch/else_branch/mm", "branch/else_branch/scale",
                                                "branch/else_branch/act", "branch/then_branch/mm",
                                                "branch/then_branch/act"]),
])
def test_rules_resolve_against_body_nodes(rule, expected):
    _, net = named(if_matmul())
    config = precision_config(rules={"r": {**rule, "precision": "fp32"}}, auto={"max_abs": None})
    decisions, matches = plan_precision(net, config, None)
    assert matches[0].nodes == expected
    assert all(decisions[n].precision == "fp32" for n in expected if n != "branch")


def test_a_bare_body_node_name_is_an_error_that_gives_the_qualified_names():
    _, net = named(if_matmul())
    config = precision_config(rules={"r": {"match": "exact", "pattern": "mm", "precision": "fp32"}})
    with pytest.raises(UserError) as error:
        plan_precision(net, config, None)
    assert "branch/else_branch/mm, branch/then_branch/mm" in str(error.value)


def test_list_only_lists_body_nodes(tmp_path):
    _, net = named(scan_rnn())
    write_names_table(net, tmp_path / "names.txt")
    lines = (tmp_path / "names.txt").read_text().splitlines()
    assert "rnn/body/in_proj\tMatMul\tu" in lines and "rnn\tScan\th_last, ys" in lines


# --- automatic rules and the plan ----------------------------------------------------------------

def _overflowing_else_branch():
    """The else-branch's Mul by 3e4 (a constant that fits FP16) produces values beyond 65504."""
    model = if_matmul(scale_else=3e4)
    feeds = {**feeds_for(model), "c": np.array(False)}
    feeds["x"] *= 10
    return model, feeds


def test_range_rule_measures_an_if_branch_and_the_if_is_labelled_mixed():
    model, feeds = _overflowing_else_branch()
    net, decisions, document, mixed = planned(model, feeds)
    assert decisions["branch/else_branch/scale"].precision == "fp32"
    assert decisions["branch/else_branch/scale"].reason.startswith("activation range")
    assert decisions["branch/else_branch/scale"].observed_max_abs > 65504
    # The branch the sample never takes has no measured range: it keeps the default.
    assert decisions["branch/then_branch/mm"].precision == "fp16"
    assert decisions["branch/then_branch/mm"].observed_max_abs is None
    entry = next(n for n in document["nodes"] if n["name"] == "branch")
    assert entry["precision"] == "mixed" and "1 fp32" in entry["reason"] and "4 fp16" in entry["reason"]
    # The kept FP32 scale keeps the result finite and close; all-FP16 would overflow to 1.0 anyway
    # after Sigmoid, so compare against the FP32 model directly.
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], atol=2e-3)


def test_range_rule_counts_every_iteration_of_a_scan_body():
    model = scan_rnn()
    feeds = feeds_for(model, sizes={"seq": 5})
    feeds["xs"][3] *= 3e5  # one late step is huge: only the stacked values show it
    _, decisions, _, _ = planned(model, feeds)
    assert decisions["rnn/body/in_proj"].precision == "fp32"
    assert decisions["rnn/body/add"].precision == "fp32"
    assert decisions["rnn/body/act"].precision == "fp16"  # Tanh is bounded
    assert decisions["rnn"].precision == "mixed"


def test_a_control_flow_node_is_never_fp16_while_its_body_is_fp32():
    model = loop_carried()
    _, decisions, document, _ = planned(model, feeds_for(model),
                                        rules={"loop": {"match": "op_type", "pattern": "Loop", "precision": "fp32"}})
    entry = next(n for n in document["nodes"] if n["name"] == "steps")
    assert entry["precision"] == "fp32" and "body nodes are" in entry["reason"]
    assert document["totals"]["flops"]["low_precision"] == 0


def test_constants_inside_a_body_are_checked():
    model = if_matmul()
    else_branch = body(model, "branch", "else_branch")
    else_branch.initializer[1].CopyFrom(numpy_helper.from_array(np.array(1e6, np.float32), "s"))
    _, decisions, _, _ = planned(model, feeds_for(model), auto={"max_abs": None})
    assert decisions["branch/else_branch/scale"].precision == "fp32"
    assert "constant s" in decisions["branch/else_branch/scale"].reason


# --- materialisation and emulation ---------------------------------------------------------------

@pytest.mark.parametrize("make", [if_matmul, loop_carried, scan_rnn, lstm_in_if])
def test_all_fp16_bodies_pass_the_full_checker_run_and_keep_declared_types(make):
    model = make()
    feeds = feeds_for(model)
    _, _, document, mixed = planned(model, feeds, auto={"max_abs": None})
    assert document["totals"]["low_precision_flop_share"] == 1.0
    reference, candidate = run(model, feeds), run(mixed, feeds)
    assert all(np.allclose(a, b, atol=5e-3) for a, b in zip(reference, candidate))
    types = _all_types(mixed)
    for node in mixed.graph.node:
        bodies = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
        for graph in bodies:  # every body computes in FP16 inside
            assert any(types.get(o) == FP16 for inner in graph.node for o in inner.output if inner.op_type != "Cast")
        if node.op_type == "If":  # both branches agree on the type the If outputs: FP16, no Cast back
            assert {g.output[0].type.tensor_type.elem_type for g in bodies} == {FP16} == {types[node.output[0]]}
        elif bodies:  # a Loop/Scan body keeps its declared inputs and outputs (the carried state)
            for value in [*bodies[0].input, *bodies[0].output]:
                assert value.type.tensor_type.elem_type in (FP32, TensorProto.BOOL, TensorProto.INT64)


def _all_types(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    return {v.name: v.type.tensor_type.elem_type for g in all_graphs(inferred.graph)
            for v in [*g.input, *g.value_info, *g.output]}


def test_a_loop_carried_state_keeps_one_type_across_iterations():
    model = loop_carried()
    _, _, _, mixed = planned(model, feeds_for(model), auto={"max_abs": None})
    loop_body = body(mixed, "steps")
    assert [v.type.tensor_type.elem_type for v in loop_body.input][2] == FP32
    assert [v.type.tensor_type.elem_type for v in loop_body.output][1:] == [FP32, FP32]
    first = loop_body.node[0]
    assert first.op_type == "Cast" and first.input[0] == "h_in"  # carried FP32, computed in FP16
    # The outer weight is stored in FP16 for the body: no Cast of it on every iteration.
    assert element_types(mixed)["W"] == FP16
    assert not [n for n in loop_body.node if n.op_type == "Cast" and n.input[0] == "W"]


def test_a_body_reads_an_outer_fp16_tensor_without_a_round_trip():
    model = if_matmul()
    _, _, _, mixed = planned(model, feeds_for(model), auto={"max_abs": None})
    for attribute in ("then_branch", "else_branch"):
        matmul = next(n for n in body(mixed, "branch", attribute).node if n.op_type == "MatMul")
        assert matmul.input[0] == "h"  # the outer FP16 value, no Cast on either side
    assert element_types(mixed)["h"] == FP16


def _f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def test_the_emulator_evaluates_a_fp16_scan_body_like_numpy_fp16():
    model = scan_rnn()
    feeds = feeds_for(model, sizes={"seq": 4})
    _, _, _, mixed = planned(model, feeds, auto={"max_abs": None})
    wx = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "Wx"))
    wh = numpy_helper.to_array(body(model, "rnn").initializer[0])
    h, expected = feeds["h0"], []
    for x_t in feeds["xs"]:  # every tensor stored in FP16, every op computed in FP32
        u = _f16(_f16(x_t) @ _f16(wx))
        v = _f16(_f16(h) @ _f16(wh))
        h = _f16(np.tanh(_f16(u + v)))
        expected.append(h)
    emulated = EmulatedRunner(mixed).run(feeds)
    assert np.allclose(emulated["ys"], np.stack(expected), rtol=2e-3, atol=1e-3)
    assert np.array_equal(emulated["h_last"], expected[-1]) or np.allclose(emulated["h_last"], expected[-1],
                                                                          rtol=2e-3, atol=1e-3)
    fp32 = run(model, feeds)[1]
    assert not np.array_equal(emulated["ys"], fp32)  # the emulation does round


def test_the_emulator_evaluates_a_mixed_if_branch_like_numpy_fp16():
    model, feeds = _overflowing_else_branch()
    _, decisions, _, mixed = planned(model, feeds)
    assert decisions["branch/else_branch/scale"].precision == "fp32"
    w0 = numpy_helper.to_array(model.graph.initializer[0])
    wb = numpy_helper.to_array(body(model, "branch", "else_branch").initializer[0])
    h = _f16(_f16(feeds["x"]) @ _f16(w0))
    e1 = _f16(h @ _f16(wb))
    e2 = e1 * np.float32(3e4)  # kept FP32: no rounding, no overflow
    with np.errstate(over="ignore"):  # the FP16 Sigmoid reads e2 rounded to FP16: beyond 65504 it is inf
        expected = _f16(np.maximum(_f16(1 / (1 + np.exp(-_f16(e2)))), 0))
    emulated = EmulatedRunner(mixed).run(feeds)["y"]
    assert np.allclose(emulated, expected, atol=1e-3)


def test_nested_bodies_are_named_measured_grouped_and_materialised():
    model = if_inside_loop()
    feeds = feeds_for(model)
    # protect=always: groups are found inside nested bodies (with evidence, this norm's input fits: fp16).
    net, decisions, document, mixed = planned(model, feeds, auto={"protect": "always"})
    assert net.parent["steps/body/choose/then_branch/mm"] == "steps/body/choose"
    assert net.parent["steps/body/choose"] == "steps"
    # The LayerNormalization deep inside is a normalization group, kept FP32.
    assert decisions["steps/body/choose/then_branch/norm"].precision == "fp32"
    assert decisions["steps/body/choose/then_branch/norm"].reason.startswith("normalization group")
    # Measured through both levels (the If's value stacked by the Loop).
    assert decisions["steps/body/choose/then_branch/mm"].observed_max_abs > 0
    assert {n["name"]: n["precision"] for n in document["nodes"]}["steps"] == "mixed"
    assert document["totals"]["flops"]["total"] == 3 * 2 * 4 * 4
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], atol=5e-3)
    assert np.allclose(EmulatedRunner(mixed).run(feeds)["h_final"], run(model, feeds)[0], atol=5e-3)


def test_bodies_that_cannot_be_carried_out_leave_their_range_unknown_and_say_so(caplog):
    """A carried state that grows each iteration cannot be stacked as a scan output."""
    loop_body = helper.make_graph(
        [helper.make_node("Concat", ["acc_in", "x"], ["acc_out"], name="grow", axis=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "grow_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", FP32, ["n"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", FP32, ["m"])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["acc"], name="grow_loop", body=loop_body),
         helper.make_node("Mul", ["acc", "acc"], ["y"], name="square")], "g",
        [helper.make_tensor_value_info("x", FP32, [2])], [helper.make_tensor_value_info("y", FP32, ["k"])],
        [numpy_helper.from_array(np.array(3, np.int64), "M")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.array([300.0, -2.0], np.float32)}
    with caplog.at_level("WARNING"):
        _, decisions, _, mixed = planned(model, feeds)
    assert "could not be measured" in caplog.text
    assert decisions["square"].precision == "fp32"  # the main graph is still measured: 9e4 > 4096
    assert decisions["grow_loop/body/grow"].observed_max_abs is None
    assert run(mixed, feeds)[0].shape == (8,)


def test_a_body_reading_an_authors_cast_placed_after_its_if_is_reordered():
    def branch(tag):
        return helper.make_graph([helper.make_node("Neg", ["a"], [f"o_{tag}"], name="neg")], tag, [],
                                 [helper.make_tensor_value_info(f"o_{tag}", FP32, [4])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("If", ["c"], ["b"], name="if", then_branch=branch("t"), else_branch=branch("e")),
        helper.make_node("Cast", ["a"], ["a16"], name="authors_cast", to=FP16),
        helper.make_node("Mul", ["a", "b"], ["y"], name="mul"),
    ]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FP32, [4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FP32, [4]), helper.make_tensor_value_info("a16", FP16, [4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    precision = {"relu": "fp32", "if": "keep", "authors_cast": "keep", "mul": "fp16",
                 "if/then_branch/neg": "fp16", "if/else_branch/neg": "fp16"}
    mixed, report = materialize(model, precision)
    onnx.checker.check_model(mixed, full_check=True)
    order = [n.name for n in mixed.graph.node]
    assert order.index("authors_cast") < order.index("if")
    assert [c["cast"] for c in report["casts_reused"]] == ["authors_cast"]
    feeds = {"x": np.array([1.0, -2.0, 3.0, 0.5], np.float32), "c": np.array(True)}
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], atol=1e-3)


def test_casts_in_a_body_do_not_make_its_control_flow_node_mixed():
    model = if_matmul()
    else_branch = body(model, "branch", "else_branch")
    cast = helper.make_node("Cast", ["e2"], ["e2c"], name="authors_cast", to=FP32)
    else_branch.node.insert(2, cast)
    else_branch.node[3].input[0] = "e2c"
    _, decisions, _, _ = planned(model, feeds_for(model), auto={"max_abs": None})
    assert decisions["branch/else_branch/authors_cast"].precision == "keep"
    assert decisions["branch"].precision == "fp16"


def test_an_if_whose_branches_agree_outputs_their_type_and_saves_the_casts_around_it():
    model = if_matmul()
    _, _, document, mixed = planned(model, feeds_for(model), auto={"max_abs": None})
    types = element_types(mixed)
    assert types["y0"] == FP16 and types["h"] == FP16
    assert types["Wa"] == FP16  # the outer weight is stored as the then-branch reads it
    for attribute in ("then_branch", "else_branch"):
        assert not [n for n in body(mixed, "branch", attribute).node if n.op_type == "Cast"]
    assert [c.input[0] for c in mixed.graph.node if c.op_type == "Cast"] == ["x", "y/fp16"]  # graph I/O only
    assert document["totals"]["casts_added"] == 2


def test_an_if_whose_branches_disagree_keeps_its_declared_type():
    model = if_matmul()
    _, _, _, mixed = planned(model, feeds_for(model), auto={"max_abs": None},
                             rules={"act": {"match": "exact", "pattern": "branch/then_branch/act", "precision": "fp32"}})
    assert element_types(mixed)["y0"] == FP32
    else_out = body(mixed, "branch", "else_branch").output[0]
    assert else_out.type.tensor_type.elem_type == FP32


def test_an_if_whose_branch_output_comes_from_a_nested_if_is_retyped_consistently():
    """Like silero VAD: an If's branch returns a nested If's output; both levels agree on FP16."""
    def graph(name, nodes, output):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, FP32, [2, 4])])
    inner = helper.make_node("If", ["c2"], ["g"], name="inner",
                             then_branch=graph("t2", [helper.make_node("Relu", ["h"], ["r1"], name="relu")], "r1"),
                             else_branch=graph("e2", [helper.make_node("Neg", ["h"], ["r2"], name="neg")], "r2"))
    outer = helper.make_node("If", ["c1"], ["o"], name="outer", then_branch=graph("t1", [inner], "g"),
                             else_branch=graph("e1", [helper.make_node("Sigmoid", ["h"], ["s"], name="sig")], "s"))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), outer,
             helper.make_node("Tanh", ["o"], ["y"], name="act")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FP32, [2, 3]),
                     helper.make_tensor_value_info("c1", TensorProto.BOOL, []),
                     helper.make_tensor_value_info("c2", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FP32, [2, 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "W")]), opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.array([[1, -2, 3], [0.5, 0.25, -1]], np.float32), "c1": np.array(True), "c2": np.array(False)}
    _, _, document, mixed = planned(model, feeds, auto={"max_abs": None})
    types = _all_types(mixed)
    assert types["o"] == FP16 and types["g"] == FP16
    assert document["totals"]["casts_added"] == 2  # the graph input and the graph output only
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], atol=1e-3)


def test_an_if_taking_both_branches_inside_a_loop_leaves_only_its_branches_unmeasured(caplog):
    model = if_inside_loop(alternate=True)
    feeds = feeds_for(model)
    with caplog.at_level("WARNING"):
        net, decisions, _, mixed = planned(model, feeds)
    assert "If branches inside Loop/Scan bodies could not be measured" in caplog.text
    assert "bodies of If/Loop/Scan" not in caplog.text
    assert decisions["steps/body/act"].observed_max_abs > 0  # the Loop body itself is still measured
    assert decisions["steps/body/choose/then_branch/mm"].observed_max_abs is None
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], atol=5e-3)
