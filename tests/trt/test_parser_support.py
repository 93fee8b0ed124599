"""The parser op-support check on real graphs (no TensorRT: the lists are data)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.trt import parser_models as pm
from trtpipe.errors import UserError
from trtpipe.graph.names.parser_support import one_line, parser_support
from trtpipe.models import BUILTIN_MODELS
from trtpipe.trt.parser.parser_ops import list_for, load_list, shipped_versions
from trtpipe.trt.parser.parser_check import check_parser_support

NEWEST = shipped_versions()[-1]


def run_in_ort(model: onnx.ModelProto, feeds: dict) -> list:
    """The test models are real: ONNX Runtime runs them."""
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def by_op(report: dict) -> dict:
    return {f["op"]: f for f in report["findings"]}


@pytest.mark.parametrize("version", shipped_versions())
def test_dynamic_quantization_ops_are_errors_naming_their_nodes(version):
    model = pm.dynamic_quantized_model()
    x = np.random.RandomState(0).randn(2, 8).astype(np.float32)
    (y,) = run_in_ort(model, {"x": x})
    assert y.shape == (2, 4) and np.isfinite(y).all()
    report = parser_support(model, load_list(version))
    found = by_op(report)
    assert report["errors"] == ["DynamicQuantizeLinear", "MatMulInteger"] and report["warnings"] == []
    assert found["DynamicQuantizeLinear"]["nodes"] == ["/fc/x_quant"]
    assert found["MatMulInteger"]["nodes"] == ["/fc/MatMul_quant"]
    assert f"marked unsupported in TensorRT {version}" in found["DynamicQuantizeLinear"]["reason"]
    note = load_list(version).ops["DynamicQuantizeLinear"]["restrictions"]  # the list's own note is kept
    assert ("model local function" in found["DynamicQuantizeLinear"]["reason"]) == ("model local function" in note)
    assert report["op_counts"] == {"Cast": 1, "DynamicQuantizeLinear": 1, "MatMulInteger": 1, "Mul": 2}


def test_conv_integer_is_an_error_and_conv_is_not():
    model = pm.conv_integer_model()
    image = np.random.RandomState(1).randint(0, 256, (1, 3, 8, 8)).astype(np.uint8)
    (y,) = run_in_ort(model, {"image": image})
    assert y.shape == (1, 4, 8, 8)
    report = parser_support(model, load_list(NEWEST))
    assert report["errors"] == ["ConvInteger"] and by_op(report)["ConvInteger"]["nodes"] == ["/stem/conv_int"]
    conv = onnx.ModelProto()
    conv.CopyFrom(model)
    conv.graph.node[0].op_type = "Conv"
    assert parser_support(conv, load_list(NEWEST))["errors"] == []


def test_contrib_ops_unknown_to_tensorrt_are_errors_and_same_named_ones_warnings():
    model = pm.contrib_ops_model()
    (y,) = run_in_ort(model, {"x": np.random.RandomState(2).randn(2, 8).astype(np.float32)})
    assert y.shape == (2, 8)
    report = parser_support(model, load_list(NEWEST))
    found = by_op(report)
    assert report["errors"] == ["com.microsoft.FusedMatMul"]
    assert found["com.microsoft.FusedMatMul"]["nodes"] == ["/ffn/fused_matmul"]
    assert "'com.microsoft' domain" in found["com.microsoft.FusedMatMul"]["reason"]
    # TensorRT's parser dispatches on the op type alone: com.microsoft.Gelu is imported as ONNX Gelu.
    assert report["warnings"] == ["com.microsoft.Gelu"]
    assert "ignores the domain" in found["com.microsoft.Gelu"]["reason"]
    assert "Relu" not in found


def test_an_op_inside_an_if_branch_is_found_with_where_it_lives():
    model = pm.if_model()
    x = np.random.RandomState(3).randn(2, 3, 3).astype(np.float32)
    (det,) = run_in_ort(model, {"x": x, "cond": np.array(True)})
    np.testing.assert_allclose(det, np.linalg.det(x), rtol=1e-4)
    report = parser_support(model, load_list(NEWEST))
    assert report["errors"] == ["Det"]
    assert by_op(report)["Det"]["nodes"] == ["/gate/If/then_branch//branch/det"]
    assert report["nodes_checked"] == 3 and report["op_counts"]["ReduceMax"] == 1
    assert "ReduceMax" in report["restrictions"]  # the list's note for an op the model uses


def test_a_local_function_is_expanded_and_its_body_checked():
    x = np.random.RandomState(4).randn(2, 8).astype(np.float32)
    fine, bad = pm.local_function_model("Relu"), pm.local_function_model("Det")
    np.testing.assert_allclose(run_in_ort(fine, {"x": x})[0], 2 * np.maximum(x, 0))
    assert parser_support(fine, load_list(NEWEST))["findings"] == []  # custom.Scaled is no op of its own
    square = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])
    bad.graph.input[0].CopyFrom(square)
    bad.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]))
    report = parser_support(bad, load_list(NEWEST))
    assert report["errors"] == ["Det"]
    assert by_op(report)["Det"]["nodes"] == ["/head/scaled/function:Scaled/fn_inner"]


def test_with_plugin_libraries_unknown_ops_need_a_plugin_and_tensorrt_plugins_are_info():
    model = pm.contrib_ops_model()
    report = parser_support(model, load_list(NEWEST), plugin_libraries=True)
    found = by_op(report)
    assert report["errors"] == [] and "com.microsoft.FusedMatMul" in report["warnings"]
    assert "needs a plugin named 'FusedMatMul'" in found["com.microsoft.FusedMatMul"]["reason"]
    nms = onnx.ModelProto()
    nms.CopyFrom(model)
    nms.graph.node[0].op_type, nms.graph.node[0].domain = "EfficientNMS_TRT", ""
    found = by_op(parser_support(nms, load_list(NEWEST)))
    nms_finding = found["EfficientNMS_TRT"]
    assert nms_finding["severity"] == "info" and "libnvinfer_plugin" in nms_finding["reason"]


def attention_model() -> onnx.ModelProto:
    out = helper.make_tensor_value_info
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], "/attn/Attention")
    graph = helper.make_graph([node], "attention", [out(n, TensorProto.FLOAT, [1, 2, 4, 8]) for n in "qkv"],
                              [out("y", TensorProto.FLOAT, [1, 2, 4, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def test_the_version_decides_attention_is_new_in_the_10_16_list():
    model = attention_model()
    old = parser_support(model, list_for("10.0.1.6", "installed"))
    assert old["errors"] == ["Attention"] and "not in TensorRT 10.0's parser list" in old["findings"][0]["reason"]
    assert old["opset"] == {"model": 23, "supported_range": [9, 20], "inside": False}
    assert parser_support(model, list_for("10.16.0.72", "installed"))["errors"] == []


@pytest.mark.parametrize("asked, chosen, says", [
    ("10.16.0.72", "10.16", "its own list"), ("10.9.0.34", "10.0", "newest shipped list not newer than it"),
    ("11.4", "11.1", "newest shipped list not newer than it"), ("8.6.1", "10.0", "older than every shipped list"),
    ("10.16.1.post1", "10.16", "its own list"),
    (None, NEWEST, "the newest list")])
def test_which_list_a_version_gets(asked, chosen, says):
    table = list_for(asked, "test")
    assert table.tensorrt_version == chosen and says in table.selection


def test_a_version_that_is_no_number_is_a_user_error():
    with pytest.raises(UserError, match=r"build.tensorrt_version is 'ten'.*build.tensorrt_version='10.16'"):
        list_for("ten", "build.tensorrt_version")


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_every_op_of_the_builtin_models_is_supported_by_every_list(name):
    model = BUILTIN_MODELS[name]()
    for version in shipped_versions():
        report = parser_support(model, load_list(version))
        assert report["findings"] == [], (name, version, report["findings"])
        assert report["opset"]["inside"]


def test_the_gate_raises_one_line_naming_ops_nodes_and_fixes(tmp_path):
    config = {"unsupported": "error", "tensorrt_version": "10.16", "plugins": []}
    with pytest.raises(UserError) as raised:
        check_parser_support(pm.dynamic_quantized_model(), config, None, tmp_path)
    text = str(raised.value)
    assert "\n" not in text and text.startswith("TensorRT 10.16's ONNX parser cannot import 2 op(s)")
    assert "DynamicQuantizeLinear (1 node: /fc/x_quant)" in text and "MatMulInteger (1 node: /fc/MatMul_quant)" in text
    assert "build.unsupported=warn" in raised.value.fix and "float model" in raised.value.fix
    assert json.loads((tmp_path / "parser_support.json").read_text())["errors"] == ["DynamicQuantizeLinear",
                                                                                      "MatMulInteger"]


def test_the_installed_tensorrt_wins_over_the_configured_version(tmp_path):
    config = {"unsupported": "warn", "tensorrt_version": "10.16", "plugins": []}
    report, fact = check_parser_support(attention_model(), config, "10.3.0.26", tmp_path)
    assert report["tensorrt_version"] == "10.0" and "installed" in report["selection"]
    assert fact.startswith("parser check (TensorRT 10.0 list): 1 unsupported") and "Attention x1" in fact


def test_one_line_lists_the_first_nodes_per_op():
    model = pm.dynamic_quantized_model()
    model.graph.node.extend([helper.make_node("MatMulInteger", ["x_q", "w_q", "x_zero", "w_zero"], [f"a{i}"],
                                              f"/extra/mm{i}") for i in range(3)])
    line = one_line(parser_support(model, load_list(NEWEST)))
    assert "MatMulInteger (4 nodes: /fc/MatMul_quant, /extra/mm0, ...)" in line


def test_an_op_inside_a_loop_body_is_found():
    model = pm.loop_model()
    m = np.random.RandomState(5).randn(3, 3).astype(np.float32)
    final, dets = run_in_ort(model, {"m": m})
    np.testing.assert_allclose(dets, [np.linalg.det(m)] * 2, rtol=1e-4)
    report = parser_support(model, load_list(NEWEST))
    assert report["errors"] == ["Det"] and by_op(report)["Det"]["nodes"] == ["/rnn/Loop/body//step/det"]
    assert report["op_counts"] == {"Det": 1, "Identity": 2, "Loop": 1}


def test_a_model_quantized_by_onnxruntime_quantize_dynamic_is_refused_at_its_integer_nodes(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weight = np.random.RandomState(6).randn(8, 4).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], "/fc/MatMul")], "float",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [onnx.numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "int8.onnx"), weight_type=QuantType.QUInt8)
    quantized = onnx.load(str(tmp_path / "int8.onnx"))
    x = np.random.RandomState(7).randn(2, 8).astype(np.float32)
    np.testing.assert_allclose(run_in_ort(quantized, {"x": x})[0], x @ weight, atol=0.1)
    assert parser_support(model, load_list(NEWEST))["findings"] == []
    report = parser_support(quantized, load_list(NEWEST))
    assert report["errors"] == ["DynamicQuantizeLinear", "MatMulInteger"]
    matmul_integer = [n.name for n in quantized.graph.node if n.op_type == "MatMulInteger"]
    assert by_op(report)["MatMulInteger"]["nodes"] == matmul_integer


def test_the_ai_onnx_domain_is_the_default_domain_and_an_importer_beats_a_local_function():
    model = pm.dynamic_quantized_model()
    for node in model.graph.node:
        node.domain = "ai.onnx"
    report = parser_support(model, load_list(NEWEST))
    assert report["errors"] == ["DynamicQuantizeLinear", "MatMulInteger"] and report["findings"][0]["domain"] == ""
    shadowing = pm.local_function_model("Det")  # a local function named like an ONNX op TensorRT imports
    shadowing.functions[0].name = shadowing.graph.node[0].op_type = "Relu"
    report = parser_support(shadowing, load_list(NEWEST))
    # The parser's Relu importer wins over the function (whose Det body is never imported): a warning,
    # since the node means Det(x) * 2, not Relu.
    assert report["errors"] == [] and report["warnings"] == ["custom.Relu"] and "Det" not in report["op_counts"]
