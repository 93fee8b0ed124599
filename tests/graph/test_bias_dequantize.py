"""sanitize folds an INT32 DequantizeLinear feeding a Conv/Gemm bias into an FP32 constant
(graph/passes/bias_dequantize.py; issue 31 item 3).

On ONNX Runtime's own `quantize_static` QDQ output: structure (no INT32 DQ left, the codes gone,
every activation/weight Q/DQ kept), the folded constant equal bit for bit to what ONNX Runtime's
DequantizeLinear computes, the model's outputs equal bit for bit before and after; and the cases
where an INT32 DQ must stay.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.qdq_models import ort_quantized_pair
from trtpipe.graph.passes.bias_dequantize import dequantized, fold_bias_dequantize
from trtpipe.graph.sanitize import sanitize_model

CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return ort_quantized_pair(tmp_path_factory.mktemp("ort_qdq"))


def _int32_dequantizers(model: onnx.ModelProto) -> list[str]:
    int32 = {t.name for t in model.graph.initializer if t.data_type == TensorProto.INT32}
    return [n.name for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int32]


def _outputs(model: onnx.ModelProto, feeds: list[dict]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=CPU)
    return [session.run(None, feed)[0] for feed in feeds]


def test_folded_model_computes_what_the_quantized_model_computes(pair, tmp_path):
    _, qdq = pair
    source = onnx.load(str(qdq))
    assert len(_int32_dequantizers(source)) == 3  # c1, c2 and fc's biases, as ONNX Runtime writes them
    report = sanitize_model(qdq, tmp_path / "out.onnx")
    folded = onnx.load(str(tmp_path / "out.onnx"))
    assert _int32_dequantizers(folded) == []
    assert sorted(e["readers"][0] for e in report["bias_dequantize_folded"]) == ["c1", "c2", "fc"]
    assert report["bias_dequantize_kept"] == []
    initializers = {t.name: t for t in folded.graph.initializer}
    for node in (n for n in folded.graph.node if n.op_type in ("Conv", "Gemm")):
        assert initializers[node.input[2]].data_type == TensorProto.FLOAT, node.name
    assert not any(t.data_type == TensorProto.INT32 for t in folded.graph.initializer)  # codes and zero points gone
    count = lambda model, op: sum(n.op_type == op for n in model.graph.node)  # noqa: E731
    assert count(folded, "DequantizeLinear") == count(source, "DequantizeLinear") - 3
    assert count(folded, "QuantizeLinear") == count(source, "QuantizeLinear")
    feeds = [{"x": x} for x in np.random.default_rng(7).uniform(-1, 2, (4, 1, 3, 16, 16)).astype(np.float32)]
    for before, after in zip(_outputs(source, feeds), _outputs(folded, feeds)):
        np.testing.assert_array_equal(before, after)


def test_folded_constant_is_onnx_runtimes_dequantize(pair):
    """The constant, not only the outputs: ONNX Runtime's DequantizeLinear run alone on the same
    codes, scale, zero point and axis gives the same FP32 bits (a rounding difference hidden by
    a later quantization would not show in the outputs)."""
    source = onnx.load(str(pair[1]))
    folded, facts = fold_bias_dequantize(source)
    values = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    inits = {t.name: t for t in source.graph.initializer}
    for node in (n for n in source.graph.node if n.name in {e["node"] for e in facts["folded"]}):
        single = helper.make_graph([node], "dq", [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT,
                                                                                   None)],
                                   [inits[name] for name in node.input])
        expected = _outputs(helper.make_model(single, opset_imports=source.opset_import), [{}])[0]
        assert values[node.output[0]].dtype == np.float32
        np.testing.assert_array_equal(values[node.output[0]], expected)


def test_dequantized_with_a_zero_point_and_a_scalar_scale():
    codes = np.array([[-2147483647, 5], [7, 1000000]], np.int32)
    value = dequantized(codes, np.float32(3e-7), np.int32(3), axis=1)
    np.testing.assert_array_equal(value, (codes - 3).astype(np.float32) * np.float32(3e-7))
    per_axis = dequantized(codes, np.array([1e-6, 2e-6], np.float32), np.array([0, 1], np.int32), axis=0)
    np.testing.assert_array_equal(per_axis[1], (codes[1] - 1).astype(np.float32) * np.float32(2e-6))


def _int32_bias_graph(reader: str) -> onnx.ModelProto:
    """x -> Conv(w, DQ(INT32 codes)) -> y; with reader="add" the DQ's output is also added to y."""
    inits = [numpy_helper.from_array(np.arange(4, dtype=np.int32) * 1000, "b_q"),
             numpy_helper.from_array(np.float32(1e-6), "b_s"),
             numpy_helper.from_array(np.ones((4, 2, 1, 1), np.float32), "w")]
    nodes = [helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], name="b_DQ"),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv")]
    outputs = ["c"]
    if reader == "add":
        nodes.append(helper.make_node("Add", ["c", "b4"], ["y"], name="add"))
        nodes.insert(1, helper.make_node("Reshape", ["b", "shape"], ["b4"], name="reshape"))
        inits.append(numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "shape"))
        outputs = ["y"]
    elif reader == "output":
        outputs = ["c", "b"]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("reader, reason", [("add", "it is read other than as a Conv/Gemm bias (reshape input 0)"),
                                            ("output", "its output is a graph output")])
def test_an_int32_dequantize_read_otherwise_stays_with_its_reason(reader, reason):
    model = _int32_bias_graph(reader)
    result, facts = fold_bias_dequantize(model)
    assert result is model and facts["folded"] == []
    assert [(k["node"], k["reason"]) for k in facts["kept"]] == [("b_DQ", reason)]


def test_the_switch_keeps_them(pair, tmp_path):
    report = sanitize_model(pair[1], tmp_path / "kept.onnx", fold_bias_dequantize=False)
    assert len(_int32_dequantizers(onnx.load(str(tmp_path / "kept.onnx")))) == 3
    assert "bias_dequantize_folded" not in report


def test_the_given_model_stays_as_it_was():
    model = _int32_bias_graph("conv")
    result, facts = fold_bias_dequantize(model)
    assert [e["node"] for e in facts["folded"]] == ["b_DQ"]
    assert [n.op_type for n in result.graph.node] == ["Conv"]
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "Conv"]  # the given model as it was
    feeds = [{"x": np.random.default_rng(0).random((1, 2, 4, 4), dtype=np.float32)}]
    np.testing.assert_array_equal(_outputs(model, feeds)[0], _outputs(result, feeds)[0])
