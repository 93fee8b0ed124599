"""sanitize removes Casts to the type their input already has (graph/passes/noop_casts.py).

Structure (the ResNet-style export sanitizes to its twin without the Casts,
byte for byte) and numerics (ONNX Runtime before and after), and every case
where a no-op Cast must stay: unknown input type, graph I/O names, subgraphs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.graph import graphs
from tests.graph.resnet_casts import cast_count, resnet_style
from trtpipe.config.schema import SanitizeConfig
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.stages.sanitize import SanitizeModel

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


def sanitize(tmp_path, model: onnx.ModelProto, name: str = "out", **options):
    save_model(model, tmp_path / f"{name}_in.onnx")
    report = sanitize_model(tmp_path / f"{name}_in.onnx", tmp_path / f"{name}.onnx", **options)
    return onnx.load(str(tmp_path / f"{name}.onnx")), report


def cast(source: str, target: str, to: int = FLOAT, name: str | None = None) -> onnx.NodeProto:
    return helper.make_node("Cast", [source], [target], name=name or f"/Cast_{target}", to=to)


def test_the_resnet_style_export_sanitizes_to_its_twin_and_computes_the_same(tmp_path):
    model = resnet_style()
    out, report = sanitize(tmp_path, model, "with")
    twin, _ = sanitize(tmp_path, resnet_style(noop_casts=False), "without")

    assert cast_count(model) == 18 and cast_count(out) == 0
    assert len(report["noop_casts_removed"]) == 18 and report["noop_casts_kept"] == []
    assert "/Cast_out" in report["noop_casts_removed"]  # the graph output's: its producer now writes `logits`
    assert (tmp_path / "with.onnx").read_bytes() == (tmp_path / "without.onnx").read_bytes()
    assert [value.name for value in out.graph.output] == ["logits"]
    onnx.checker.check_model(out, full_check=True)
    x = graphs.random_input((1, 8, 8, 3))
    np.testing.assert_array_equal(graphs.run(out, {"input": x})[0], graphs.run(model, {"input": x})[0])
    assert twin.graph.node[-1].output[0] == "logits"


def test_real_conversions_and_unknown_types_stay(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
        cast("r", "half", FLOAT16),  # a real conversion
        cast("half", "back", FLOAT),  # FP16 -> FP32: real too
        helper.make_node("Mystery", ["back"], ["m"], name="/Mystery", domain="custom"),  # output type unknown
        cast("m", "m_float"),
        helper.make_node("Add", ["m_float", "back"], ["y"], name="/Add"),
    ]
    model = graphs.make_model(nodes, [graphs.float_input("x", [2, 3])], [graphs.float_input("y", [2, 3])])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    out, report = sanitize(tmp_path, model)
    assert report["noop_casts_removed"] == report["noop_casts_kept"] == [] and cast_count(out) == 3
    model.graph.value_info.append(graphs.float_input("m", [2, 3]))  # its author's word: no inference checked it
    out, report = sanitize(tmp_path, model, "stated")
    assert report["noop_casts_removed"] == [] and cast_count(out) == 3


def test_a_graph_output_keeps_its_name_and_a_cast_that_gives_it_stays(tmp_path):
    nodes = [
        cast("x", "x_copy", name="/Cast_in"),  # graph input -> graph output: the Cast is the output's name
        helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
        cast("r", "y1", name="/Cast_y1"),  # r gets renamed y1
        cast("r", "y2", name="/Cast_y2"),  # the same tensor as y1: both names are the interface
        cast("r", "inner", name="/Cast_inner"),
        helper.make_node("Neg", ["inner"], ["y3"], name="/Neg"),
    ]
    outputs = [graphs.float_input(name, [2, 3]) for name in ("x_copy", "y1", "y2", "y3")]
    model = graphs.make_model(nodes, [graphs.float_input("x", [2, 3])], outputs)
    out, report = sanitize(tmp_path, model)

    assert sorted(report["noop_casts_removed"]) == ["/Cast_inner", "/Cast_y1"]
    assert {entry["node"] for entry in report["noop_casts_kept"]} == {"/Cast_in", "/Cast_y2"}
    assert [value.name for value in out.graph.output] == ["x_copy", "y1", "y2", "y3"]
    relu = next(node for node in out.graph.node if node.op_type == "Relu")
    assert list(relu.output) == ["y1"]
    onnx.checker.check_model(out, full_check=True)
    x = graphs.random_input((2, 3))
    for got, want in zip(graphs.run(out, {"x": x}), graphs.run(model, {"x": x})):
        np.testing.assert_array_equal(got, want)


def test_subgraphs_are_left_alone(tmp_path):
    """An If body reads a no-op Cast's output by name and holds a no-op Cast itself: both stay."""
    body_nodes = [cast("read", "body_cast", name="/body/Cast"), helper.make_node("Neg", ["body_cast"], ["out"],
                                                                                  name="/body/Neg")]
    branch = helper.make_graph(body_nodes, "branch", [], [graphs.float_input("out", [2, 3])])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
        cast("r", "read", name="/Cast_read"),  # read by the bodies
        cast("r", "free", name="/Cast_free"),  # read by the main graph only
        helper.make_node("ReduceSum", ["free"], ["s"], name="/ReduceSum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="/Greater"),
        helper.make_node("If", ["cond"], ["y"], name="/If", then_branch=branch, else_branch=branch),
    ]
    zero = onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")
    model = graphs.make_model(nodes, [graphs.float_input("x", [2, 3])], [graphs.float_input("y", [2, 3])], [zero])
    out, report = sanitize(tmp_path, model)

    assert report["noop_casts_removed"] == ["/Cast_free"]
    assert [entry["node"] for entry in report["noop_casts_kept"]] == ["/Cast_read"]
    if_node = next(node for node in out.graph.node if node.op_type == "If")
    assert all(cast_count(attribute.g) == 1 for attribute in if_node.attribute)
    x = graphs.random_input((2, 3))
    np.testing.assert_array_equal(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0])


def test_without_shape_inference_only_stated_types_count(tmp_path):
    """value_info an author wrote is no evidence (nothing checks it): a Cast on a graph input goes, the rest stay."""
    nodes = [cast("x", "xc", name="/Cast_x"), helper.make_node("Relu", ["xc"], ["r"], name="/Relu"),
             cast("r", "rc", name="/Cast_r"), helper.make_node("Neg", ["rc"], ["y"], name="/Neg")]
    model = graphs.make_model(nodes, [graphs.float_input("x", [2, 3])], [graphs.float_input("y", [2, 3])])
    model.graph.value_info.append(graphs.float_input("r", [2, 3]))
    _, report = sanitize(tmp_path, model, infer_shapes=False)
    assert report["noop_casts_removed"] == ["/Cast_x"]
    _, report = sanitize(tmp_path, model, "inferred")
    assert sorted(report["noop_casts_removed"]) == ["/Cast_r", "/Cast_x"]


def test_the_setting_off_keeps_them(tmp_path):
    out, report = sanitize(tmp_path, resnet_style(), remove_noop_casts=False)
    assert cast_count(out) == 18 and "noop_casts_removed" not in report


def test_the_stage_line_says_how_many(tmp_path):
    save_model(resnet_style(), tmp_path / "src.onnx")
    config = {key: getattr(SanitizeConfig, key) for key in SanitizeConfig.__dataclass_fields__}
    outcome = SanitizeModel().run({"model": tmp_path / "src.onnx"}, config, tmp_path)
    assert outcome.summary == "46 -> 28 nodes, 0 folded; 18 no-op Cast(s) removed"
    assert len(outcome.details["noop_casts_removed"]) == 18
