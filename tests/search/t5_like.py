"""A small T5-style encoder for the search tests (random weights, nothing downloaded).

What makes it T5 and not BERT, as far as FP16 is concerned:
- RMSNorm decomposed as the exporter writes it (Pow, ReduceMean, Add eps, Sqrt,
  Div, Mul by the gain): no mean subtraction, no biases anywhere;
- attention scores without 1/sqrt(d) scaling, plus a relative position bias
  (a learned table gathered by bucket indices) and the FP32-min padding mask;
- a gated-GELU FFN (`gelu_new`, the tanh form, times a second projection);
- a residual stream that grows into the thousands in a few outlier channels,
  so every RMSNorm's `Pow` overflows FP16 and the FFN outputs of the later
  layers exceed `precision.auto.max_abs` (4096): the automatic rules keep
  those big MatMuls FP32 although FP16 holds them.

Decision: shapes are small (sequence 16, width 64, 4 layers) so a search of
30 trials runs in seconds; the FLOPs are split like a real encoder's (the FFN
about two thirds, the projections a quarter, the score MatMuls a few percent).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto

from trtpipe.models._builders import GraphBuilder, seeded_rng, tensor_info

SEQUENCE, HIDDEN, HEADS, FFN, LAYERS, VOCAB, BUCKETS = 16, 64, 4, 256, 4, 128, 8
HEAD_DIM = HIDDEN // HEADS
OUTLIERS = {5: 900.0, 30: -700.0}  # channel -> embedding value; the FFNs grow them layer by layer
GROWTH = (1000.0, 2500.0, 4500.0, 7000.0)  # what each layer's FFN adds to the outlier channels
MEAN_GATED = 0.3  # mean of gelu(wi_0 x) * wi_1 x over the FFN width (measured)
FLOAT32_MIN = -3.4028234663852886e38
INPUT_SPECS = {
    "input_ids": {"low": 0, "high": VOCAB, "dtype": "int64"},
    "attention_mask": {"low": 0, "high": 2, "dtype": "int64"},
}


def build_t5_like(seed: int = 5) -> onnx.ModelProto:
    rng = seeded_rng(seed)
    b = GraphBuilder()
    table = rng.normal(0.0, 4.0, (VOCAB, HIDDEN))
    for channel, value in OUTLIERS.items():
        table[:, channel] = value
    x = b.node("Gather", "/shared", [b.initializer("shared.weight", table.astype(np.float32)), "input_ids"])
    mask = _mask(b)
    bias = _position_bias(b, rng)
    for layer in range(LAYERS):
        x = _layer(b, rng, layer, x, mask, bias)
    final_gain = rng.uniform(0.8, 1.2, HIDDEN)
    for channel in OUTLIERS:
        final_gain[channel] = 0.02  # as trained T5 checkpoints do: the outliers are damped at the end
    out = _rms_norm(b, "/encoder/final_layer_norm", x, final_gain)
    b.rename_tensor(out, "last_hidden_state")
    return b.model(
        "t5_like_encoder",
        inputs=[tensor_info("input_ids", TensorProto.INT64, [1, SEQUENCE]),
                tensor_info("attention_mask", TensorProto.INT64, [1, SEQUENCE])],
        outputs=[tensor_info("last_hidden_state", TensorProto.FLOAT, [1, SEQUENCE, HIDDEN])],
        opset=13, doc_string="T5-like encoder for the search tests",
    )


def _layer(b: GraphBuilder, rng, layer: int, x: str, mask: str, bias: str) -> str:
    scope = f"/encoder/block.{layer}"
    normed = _rms_norm(b, f"{scope}/layer.0/layer_norm", x, rng.uniform(0.1, 0.3, HIDDEN))
    attention = _attention(b, rng, f"{scope}/layer.0/SelfAttention", normed, mask, bias)
    x = b.node("Add", f"{scope}/layer.0", [x, attention])
    normed = _rms_norm(b, f"{scope}/layer.1/layer_norm", x, rng.uniform(0.1, 0.3, HIDDEN))
    ffn = f"{scope}/layer.1/DenseReluDense"
    gate = _gelu_new(b, f"{ffn}/act", _project(b, rng, f"{ffn}/wi_0", normed, (HIDDEN, FFN), 1.0))
    linear = _project(b, rng, f"{ffn}/wi_1", normed, (HIDDEN, FFN), 1.0, correlated_with=f"{ffn}/wi_0")
    hidden = b.node("Mul", ffn, [gate, linear])
    wo = rng.normal(0.0, 0.3 / np.sqrt(FFN), (FFN, HIDDEN))
    for channel, value in OUTLIERS.items():  # the outliers grow by ~1e3, 2.5e3, 4.5e3, 7e3 per layer
        wo[:, channel] = np.sign(value) * GROWTH[layer] / (MEAN_GATED * FFN)
    out = b.node("MatMul", f"{ffn}/wo", [hidden, b.initializer(f"block.{layer}.wo.weight", wo.astype(np.float32))])
    return b.node("Add", f"{scope}/layer.1", [x, out])


def _project(b: GraphBuilder, rng, scope: str, x: str, shape, gain: float, correlated_with: str = "") -> str:
    weight = rng.normal(0.0, gain / np.sqrt(shape[0] * 0.04), shape).astype(np.float32)
    if correlated_with:  # gelu(a) * b has a positive mean when b follows a: the FFN pushes the outliers
        (shared,) = [t for t in b.initializers if t.name == correlated_with.strip("/").replace("/", ".") + ".weight"]
        weight = (0.5 * weight + 0.5 * onnx.numpy_helper.to_array(shared)).astype(np.float32)
    return b.node("MatMul", scope, [x, b.initializer(scope.strip("/").replace("/", ".") + ".weight", weight)])


def _rms_norm(b: GraphBuilder, scope: str, x: str, gain) -> str:
    two = b.constant(scope, np.array(2.0, dtype=np.float32))
    variance = b.node("ReduceMean", scope, [b.node("Pow", scope, [x, two])], axes=[-1], keepdims=1)
    shifted = b.node("Add", scope, [variance, b.constant(scope, np.array(1e-6, dtype=np.float32))])
    normed = b.node("Div", scope, [x, b.node("Sqrt", scope, [shifted])])
    weight = b.initializer(scope.strip("/").replace("/", ".") + ".weight", np.asarray(gain, dtype=np.float32))
    return b.node("Mul", scope, [weight, normed])


def _attention(b: GraphBuilder, rng, scope: str, x: str, mask: str, bias: str) -> str:
    heads = b.constant(scope, np.array([1, SEQUENCE, HEADS, HEAD_DIM], dtype=np.int64))

    def split(name: str, perm) -> str:
        projected = _project(b, rng, f"{scope}/{name}", x, (HIDDEN, HIDDEN), 1.0)
        return b.node("Transpose", scope, [b.node("Reshape", scope, [projected, heads])], perm=perm)

    query, key, value = split("q", [0, 2, 1, 3]), split("k", [0, 2, 3, 1]), split("v", [0, 2, 1, 3])
    scores = b.node("MatMul", scope, [query, key])  # T5: no 1/sqrt(d) scaling
    scores = b.node("Add", scope, [b.node("Add", scope, [scores, bias]), mask])
    context = b.node("MatMul", scope, [b.node("Softmax", scope, [scores], axis=-1), value])
    merged = b.constant(scope, np.array([1, SEQUENCE, HIDDEN], dtype=np.int64))
    context = b.node("Reshape", scope, [b.node("Transpose", scope, [context], perm=[0, 2, 1, 3]), merged])
    return _project(b, rng, f"{scope}/o", context, (HIDDEN, HIDDEN), 0.5)


def _position_bias(b: GraphBuilder, rng) -> str:
    scope = "/encoder/block.0/layer.0/SelfAttention/relative_attention_bias"
    distance = np.arange(SEQUENCE)[None, :] - np.arange(SEQUENCE)[:, None]
    buckets = np.clip(np.abs(distance), 0, BUCKETS // 2 - 1) + (distance > 0) * (BUCKETS // 2)
    table = b.initializer("relative_attention_bias.weight", rng.normal(0.0, 3.0, (BUCKETS, HEADS)).astype(np.float32))
    gathered = b.node("Gather", scope, [table, b.initializer("relative_buckets", buckets.astype(np.int64))])
    per_head = b.node("Transpose", scope, [gathered], perm=[2, 0, 1])
    return b.node("Unsqueeze", scope, [per_head, b.constant(scope, np.array([0], dtype=np.int64))])


def _mask(b: GraphBuilder) -> str:
    axes = b.constant("", np.array([1, 2], dtype=np.int64))
    as_float = b.node("Cast", "", [b.node("Unsqueeze", "", ["attention_mask", axes])], to=TensorProto.FLOAT)
    inverted = b.node("Sub", "", [b.constant("", np.array(1.0, dtype=np.float32)), as_float])
    return b.node("Mul", "", [inverted, b.constant("", np.array(FLOAT32_MIN, dtype=np.float32))])


def _gelu_new(b: GraphBuilder, scope: str, x: str) -> str:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as HF's NewGELUActivation exports."""
    def const(value: float) -> str:
        return b.constant(scope, np.array(value, dtype=np.float32))

    cubed = b.node("Pow", scope, [x, const(3.0)])
    inner = b.node("Add", scope, [x, b.node("Mul", scope, [cubed, const(0.044715)])])
    tanh = b.node("Tanh", scope, [b.node("Mul", scope, [inner, const(float(np.sqrt(2.0 / np.pi)))])])
    return b.node("Mul", scope, [b.node("Mul", scope, [x, const(0.5)]), b.node("Add", scope, [tanh, const(1.0)])])
