"""upgrade_model: opset conversion + LayerNorm fusion from file to file, deterministic."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.graph import graphs
from trtpipe.graph.names.absorbed_nodes import read_absorbed_nodes
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.upgrade import upgrade_model


def test_opset13_layernorm_is_converted_and_fused(tmp_path):
    model = graphs.layernorm_graph(opset=13)
    save_model(model, tmp_path / "in.onnx")
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx")

    out = onnx.load(str(tmp_path / "out.onnx"))
    assert (report["opset_before"], report["opset_after"]) == (13, 17)
    assert json.loads(json.dumps(report)) == report
    assert [n.op_type for n in out.graph.node] == ["LayerNormalization", "Relu"]
    assert list(read_absorbed_nodes(out)) == [f"{graphs.LN_SCOPE}/LayerNormalization"]
    assert "ln_out" in {info.name for info in out.graph.value_info}, "shapes inferred again"
    onnx.checker.check_model(out, full_check=True)
    x = graphs.random_input((2, 5, 8))
    np.testing.assert_allclose(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0], atol=1e-5)

    upgrade_model(tmp_path / "in.onnx", tmp_path / "again.onnx")
    assert (tmp_path / "out.onnx").read_bytes() == (tmp_path / "again.onnx").read_bytes()


def test_fusion_skipped_below_opset_17(tmp_path):
    save_model(graphs.layernorm_graph(opset=13), tmp_path / "in.onnx")
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx", target_opset=16)
    assert report["opset_after"] == 16 and "skipped" in report["layernorm"]
    assert "ReduceMean" in {n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node}


def test_layernorm2d_is_refused_and_reported(tmp_path):
    save_model(graphs.layernorm2d_graph(opset=13), tmp_path / "in.onnx")
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert report["layernorm"]["fused"] == []
    assert "axis 1" in report["layernorm"]["refused"][0]["reason"]


def test_converted_reshapes_get_explicit_allowzero(tmp_path):
    save_model(graphs.foldable_graph(), tmp_path / "in.onnx")  # opset 14 Reshape without allowzero
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert report["reshape_allowzero_made_explicit"] == ["/Reshape"]
    reshape = next(n for n in onnx.load(str(tmp_path / "out.onnx")).graph.node if n.op_type == "Reshape")
    assert [(a.name, a.i) for a in reshape.attribute] == [("allowzero", 0)]


def _quantized_in_a_branch() -> onnx.ModelProto:
    """An If whose then-branch quantizes x (Q/DQ) and whose else-branch passes it on, opset 13."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name, nodes, inits):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [4])],
                                 inits)

    quantize = branch("then", [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="Q"),
                               helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["then_y"], name="DQ")],
                      [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "zp")])
    identity = branch("else", [helper.make_node("Identity", ["x"], ["else_y"], name="pass")], [])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=quantize, else_branch=identity)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target, expected", [(None, 19), (17, 17)])
def test_a_model_holding_qdq_is_raised_to_19_unless_the_target_is_pinned(tmp_path, target, expected):
    """Issue 31: opset 19 lets Q/DQ scales be FP16 (no Cast at each); a pinned target is the user's."""
    save_model(_quantized_in_a_branch(), tmp_path / "in.onnx")
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx", target_opset=target)
    assert report["opset_after"] == expected
    assert ("raised to 19" in report.get("target_reason", "")) == (target is None)
    written = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(written, full_check=True)
    assert written.opset_import[0].version == expected
