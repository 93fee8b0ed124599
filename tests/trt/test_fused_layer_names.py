"""Engine layer names without metadata, as real engines spell fused layers (see layer_names.py)."""

from __future__ import annotations

import pytest

from trtpipe.trt.inspect.layer_names import name_parts, nodes_of_layer

NODES = {"Conv_12", "Clip_16", "Sigmoid_3", "Mul_4", "/Einsum_1", "/attn/Softmax", "a + b", "MatMul"}


@pytest.mark.parametrize("name, parts, nodes", [
    ("features.0.0.weight + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)",
     ["features.0.0.weight", "QuantizeLinear_8", "Conv_12", "Clip_16"], ["Conv_12", "Clip_16"]),
    ("PWN(PWN(Sigmoid_3), Mul_4)", ["Sigmoid_3", "Mul_4"], ["Sigmoid_3", "Mul_4"]),
    # A Myelin region names its first and last member only: the ones between are not guessed.
    ("{ForeignNode[/attn/Softmax.../Einsum_1]}", ["/attn/Softmax", "/Einsum_1"], ["/attn/Softmax", "/Einsum_1"]),
    ("{ForeignNode[/Constant_7_output_0 + ONNXTRT_Broadcast.../Einsum_1]}",
     ["/Constant_7_output_0", "ONNXTRT_Broadcast", "/Einsum_1"], ["/Einsum_1"]),
    ("Reformatting CopyNode for Output Tensor 0 to {ForeignNode[/attn/Softmax.../Einsum_1]}", [], []),
    ("a + b", ["a", "b"], ["a + b"]),  # a node whose own name looks fused is that node
    ("MatMul_3", ["MatMul_3"], ["MatMul"]),  # the parser's <node>_<N> extra layer
    ("ONNXTRT_ShapeShuffle_336", ["ONNXTRT_ShapeShuffle_336"], []),
])
def test_fused_names_map_to_exactly_the_nodes_they_name(name, parts, nodes):
    assert name_parts(name) == parts
    assert nodes_of_layer(name, None, NODES) == nodes


def test_metadata_wins_over_the_name():
    assert nodes_of_layer("Conv_12 + PWN(Clip_16)", "[ONNX Layer: MatMul]", NODES) == ["MatMul"]
