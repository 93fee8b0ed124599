"""The built-in `t5` and `gpt2` models: the architecture they claim and the FP16 trouble they carry.

The troubles are shown without FP16 hardware: intermediates of the FP32 model
are exposed as graph outputs in ONNX Runtime and compared with FP16's largest
finite value.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tests.models.test_builtin_models import FP16_MAX, nodes, run, sample_inputs
from trtpipe.models import builtin_model
from trtpipe.models.catalog import DECODER_VOCAB_SIZE, T5_VOCAB_SIZE


@pytest.fixture(scope="module")
def t5() -> onnx.ModelProto:
    return builtin_model("t5")


@pytest.fixture(scope="module")
def gpt2() -> onnx.ModelProto:
    return builtin_model("gpt2")


def by_name(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {node.name: node for node in model.graph.node}


def producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {output: node for node in model.graph.node for output in node.output}


def test_t5_has_no_biases_and_rmsnorm_without_mean(t5):
    assert not [t.name for t in t5.graph.initializer if t.name.endswith(".bias")]
    made_by = producers(t5)
    squares = [n for n in nodes(t5, "Pow") if "layer_norm" in n.name]
    assert len(squares) == 2 * 4 + 1  # two per block and the final norm
    for square in squares:
        source = made_by.get(square.input[0])
        assert source is None or source.op_type != "Sub"  # x^2, not (x - mean)^2
    assert {n.op_type for n in t5.graph.node if n.name.startswith("/encoder/final_layer_norm/")} == {
        "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Constant"}


def test_t5_relative_position_bias_is_bucketed_in_graph_and_shared(t5):
    gathers = [n for n in nodes(t5, "Gather") if "relative_attention_bias" in n.name]
    assert len(gathers) == 1  # one table, in the first layer
    assert {"Range", "Log", "Where", "Min", "Less", "Greater"} <= {n.op_type for n in t5.graph.node}
    mask = by_name(t5)["/encoder/Mul"].output[0]  # (1 - mask) * finfo(float32).min
    position_bias = [n for n in t5.graph.node if n.op_type == "Add" and mask in n.input]
    assert len(position_bias) == 1
    consumers = [n for n in t5.graph.node if position_bias[0].output[0] in n.input]
    assert len(consumers) == 4  # every layer adds the same bias to its scores


def test_t5_ffn_is_gated_gelu(t5):
    names = by_name(t5)
    for index in range(4):
        scope = f"/encoder/block.{index}/layer.1/DenseReluDense"
        gate, linear = names[f"{scope}/wi_0/MatMul"], names[f"{scope}/wi_1/MatMul"]
        product = names[f"{scope}/Mul"]
        assert linear.output[0] in product.input and names[f"{scope}/act/Tanh"]
        assert names[f"{scope}/wo/MatMul"].input[0] == product.output[0]
        assert gate.output[0] in names[f"{scope}/act/Pow"].input


def test_t5_residual_grows_into_the_thousands_and_overflows_fp16(t5):
    feeds = sample_inputs(t5, "t5")
    residual = "/encoder/block.3/layer.1/Add_output_0"
    final_square = "/encoder/final_layer_norm/Pow_output_0"
    cube = "/encoder/block.0/layer.1/DenseReluDense/act/Pow_output_0"
    outputs = run(t5, feeds, [residual, final_square, cube])
    assert 1e4 < np.abs(outputs[residual]).max() < FP16_MAX  # representable, but spacing 8 in FP16
    assert np.abs(outputs[final_square]).max() > FP16_MAX * 100  # x^2 ~1e8
    assert np.abs(outputs[cube]).max() > FP16_MAX  # the tanh GELU's x^3
    hidden = outputs["last_hidden_state"]
    assert np.isfinite(hidden).all() and 0.5 < np.abs(hidden).max() < 50


def test_t5_names_are_exporter_style_and_not_bert_names(t5):
    bert = {n.name for n in builtin_model("transformer").graph.node}
    names = {n.name for n in t5.graph.node}
    assert not names & bert
    assert "/encoder/block.0/layer.0/SelfAttention/q/MatMul" in names
    assert "/encoder/block.0/layer.0/SelfAttention/relative_attention_bias/Gather" in names
    ids = sample_inputs(t5, "t5")["input_ids"]
    assert ids.min() >= 0 and ids.max() < T5_VOCAB_SIZE


def test_decoder_is_causal(gpt2):
    feeds = sample_inputs(gpt2, "gpt2")
    assert feeds["input_ids"].max() < DECODER_VOCAB_SIZE
    changed = {"input_ids": feeds["input_ids"].copy()}
    changed["input_ids"][0, 10:] = (changed["input_ids"][0, 10:] + 1) % DECODER_VOCAB_SIZE
    before, after = run(gpt2, feeds)["logits"], run(gpt2, changed)["logits"]
    np.testing.assert_array_equal(before[0, :10], after[0, :10])  # earlier tokens never see later ones
    assert np.abs(before[0, 10:] - after[0, 10:]).max() > 0.05


def test_decoder_mask_is_built_in_graph_with_the_fp32_minimum(gpt2):
    where = nodes(gpt2, "Where")
    assert len(where) == 1 and "GreaterOrEqual" in {n.op_type for n in gpt2.graph.node}
    constants = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in nodes(gpt2, "Constant")}
    assert float(constants[where[0].input[2]]) == float(np.finfo(np.float32).min)
    assert gpt2.graph.output[0].name == "logits"
    dims = [d.dim_value for d in gpt2.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 16, DECODER_VOCAB_SIZE]


def test_decoder_layer_norms_overflow_fp16_while_fp32_is_finite(gpt2):
    feeds = sample_inputs(gpt2, "gpt2")
    squares = [n.output[0] for n in nodes(gpt2, "Pow") if "/ln_" in n.name]
    outputs = run(gpt2, feeds, squares)
    assert max(np.abs(outputs[s]).max() for s in squares) > FP16_MAX * 10
    assert np.isfinite(outputs["logits"]).all()
    assert not [t for t in gpt2.graph.initializer if t.data_type != TensorProto.FLOAT and t.name.endswith("weight")]
