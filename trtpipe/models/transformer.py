"""Built-in `transformer`: a small BERT-like encoder whose LayerNorms overflow in FP16.

What it reproduces (DESIGN.md problems 2 and 3): a post-LN BERT exported by
`torch.onnx.export` at opset 13, so every LayerNorm is decomposed into
ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, and the attention mask is
Hugging Face's `(1.0 - mask) * torch.finfo(torch.float32).min`. Two channels of
the residual stream are "outlier channels" of a few hundred, as found in real
BERT/RoBERTa checkpoints; deviations of ~450 from the mean make `Pow(x - mean, 2)`
~2e5 in every LayerNorm, far above FP16's 65504, while the FP32 model is finite
and well conditioned. In FP16 the variance becomes inf, the normalised
activations zero and every token's output the LayerNorm bias.

A naive FP16 conversion fails even earlier: the mask constant becomes -inf and
`(1 - 1) * -inf` is NaN for every kept token, so the whole output is NaN. A
working precision plan must keep both the mask arithmetic and the LayerNorms
in FP32.

Decisions:
- Initializers carry the PyTorch parameter names (`encoder.layer.0.attention.self.query.weight`)
  with MatMul weights stored transposed as [in, out], as the exporter does;
  the exporter would often call those `onnx::MatMul_<n>`, but readable names
  make the plan and the tests easier to follow.
- The extended mask constant stays exactly -3.4028234663852886e38 (FP32 min),
  a `Constant` node as the exporter writes it; it is not representable in FP16.
- Reshape targets are constants, as the exporter leaves them after its
  constant folding for static input shapes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models.catalog import TRANSFORMER_VOCAB_SIZE
from trtpipe.models._builders import (
    GraphBuilder,
    add_decomposed_layer_norm,
    module_scope,
    seeded_rng,
    tensor_info,
)

OPSET = 13
SEED = 1013
VOCAB_SIZE = TRANSFORMER_VOCAB_SIZE
SEQUENCE_LENGTH = 16
HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
FFN = 128
LAYERS = 2
LAYER_NORM_EPS = 1e-12  # BERT's value
FLOAT32_MIN = -3.4028234663852886e38  # torch.finfo(torch.float32).min, as Hugging Face uses it

# The outlier channels and the value the residual stream holds in them.
# |value| must stay above 256 for Pow to overflow FP16 and below ~512 so that
# the residual stream itself is still an ordinary FP16 value.
OUTLIER_CHANNELS = {7: 420.0, 41: -380.0}
# Spread of the ordinary channels of the residual stream (before LayerNorm).
ORDINARY_SPREAD = 30.0
# RMS per channel of the residual stream, outliers included (measured 77-81).
# Projections reading it use weights of target / (RESIDUAL_RMS * sqrt(fan_in))
# so their outputs are ~target: queries/keys ~1.5 (scores of a few units),
# the FFN input ~2 (GELU's curved region), the pooler ~1 (tanh not saturated).
RESIDUAL_RMS = 80.0


def build_transformer() -> onnx.ModelProto:
    """The encoder as described in the module docstring; deterministic to the byte."""
    builder = encoder_graph(LAYERS, _self_attention)
    return builder.model(
        "bert_like_encoder",
        inputs=[
            tensor_info("input_ids", TensorProto.INT64, [1, SEQUENCE_LENGTH]),
            tensor_info("attention_mask", TensorProto.INT64, [1, SEQUENCE_LENGTH]),
        ],
        outputs=[
            tensor_info("last_hidden_state", TensorProto.FLOAT, [1, SEQUENCE_LENGTH, HIDDEN]),
            tensor_info("pooler_output", TensorProto.FLOAT, [1, HIDDEN]),
        ],
        opset=OPSET,
        doc_string=__doc__.split("\n\n")[0],
    )


def _scope(qualified_name: str) -> str:
    """Exporter scope of a BERT module; `encoder.layer` is a ModuleList."""
    return module_scope(qualified_name, module_lists=("encoder.layer",))


def _embeddings(builder: GraphBuilder, rng: np.random.RandomState) -> str:
    words = rng.normal(0.0, ORDINARY_SPREAD, (VOCAB_SIZE, HIDDEN))
    for channel, value in OUTLIER_CHANNELS.items():
        words[:, channel] += value
    positions = rng.normal(0.0, 0.2 * ORDINARY_SPREAD, (SEQUENCE_LENGTH, HIDDEN))
    word_table = builder.initializer("embeddings.word_embeddings.weight", words.astype(np.float32))
    position_table = builder.initializer(
        "embeddings.position_embeddings.weight", positions.astype(np.float32)
    )
    position_ids = builder.initializer(
        "embeddings.position_ids", np.arange(SEQUENCE_LENGTH, dtype=np.int64)[None, :]
    )
    word_vectors = builder.node("Gather", _scope("embeddings.word_embeddings"), [word_table, "input_ids"])
    position_vectors = builder.node(
        "Gather", _scope("embeddings.position_embeddings"), [position_table, position_ids]
    )
    summed = builder.node("Add", _scope("embeddings"), [word_vectors, position_vectors])
    return _layer_norm(builder, rng, "embeddings.LayerNorm", summed)


def _layer_norm(builder: GraphBuilder, rng: np.random.RandomState, prefix: str, x: str) -> str:
    """A LayerNorm whose weights keep the outlier channels at a few hundred.

    A trained BERT keeps its outlier channels through every LayerNorm with
    large biases there. The outliers dominate the variance, so ordinary
    channels come out of the normalisation at ~0.4; a gain of 2 * ORDINARY_SPREAD
    restores a spread of about ORDINARY_SPREAD.
    """
    gain = rng.uniform(0.8, 1.2, HIDDEN) * ORDINARY_SPREAD * 2.0
    shift = rng.normal(0.0, 0.1 * ORDINARY_SPREAD, HIDDEN)
    for channel, value in OUTLIER_CHANNELS.items():
        gain[channel] = 5.0
        shift[channel] = value
    weight = builder.initializer(f"{prefix}.weight", gain.astype(np.float32))
    bias = builder.initializer(f"{prefix}.bias", shift.astype(np.float32))
    return add_decomposed_layer_norm(builder, _scope(prefix), x, weight, bias, -1, LAYER_NORM_EPS)


def _linear(
    builder: GraphBuilder,
    rng: np.random.RandomState,
    prefix: str,
    x: str,
    shape: tuple[int, int],
    weight_std: float,
) -> str:
    """`nn.Linear` as exported: MatMul with the [in, out] weight, then Add(bias, product)."""
    weight = builder.initializer(
        f"{prefix}.weight", rng.normal(0.0, weight_std, shape).astype(np.float32)
    )
    bias = builder.initializer(
        f"{prefix}.bias", rng.normal(0.0, 0.02, shape[1]).astype(np.float32)
    )
    product = builder.node("MatMul", _scope(prefix), [x, weight])
    return builder.node("Add", _scope(prefix), [bias, product])


def _reading_residual_std(target: float) -> float:
    """Weight std for a projection of the residual stream whose outputs should be ~target."""
    return target / (RESIDUAL_RMS * np.sqrt(HIDDEN))


def _extended_attention_mask(builder: GraphBuilder) -> str:
    """Hugging Face's `(1.0 - mask[:, None, None, :].float()) * finfo(float32).min`."""
    axis_one = builder.constant("", np.array([1], dtype=np.int64))
    unsqueezed = builder.node("Unsqueeze", "", ["attention_mask", axis_one])
    axis_two = builder.constant("", np.array([2], dtype=np.int64))
    unsqueezed = builder.node("Unsqueeze", "", [unsqueezed, axis_two])
    as_float = builder.node("Cast", "", [unsqueezed], to=TensorProto.FLOAT)
    one = builder.constant("", np.array(1.0, dtype=np.float32))
    inverted = builder.node("Sub", "", [one, as_float])
    minimum = builder.constant("", np.array(FLOAT32_MIN, dtype=np.float32))
    return builder.node("Mul", "", [inverted, minimum])


def encoder_graph(layers: int, self_attention: Callable) -> GraphBuilder:
    """Embeddings, `layers` post-LN layers and the pooler, weights drawn in build order.

    `self_attention(builder, rng, prefix, x, mask)` builds each layer's attention:
    this model's, or bench/common/encoders.py's dynamic-batch one (same weights).
    """
    rng = seeded_rng(SEED)
    builder = GraphBuilder()
    hidden = _embeddings(builder, rng)
    mask = _extended_attention_mask(builder)
    for index in range(layers):
        hidden = _encoder_layer(builder, rng, f"encoder.layer.{index}", hidden, mask, self_attention)
    builder.rename_tensor(hidden, "last_hidden_state")
    _pooler(builder, rng, "last_hidden_state")
    return builder


def _encoder_layer(
    builder: GraphBuilder, rng: np.random.RandomState, prefix: str, x: str, mask: str, self_attention: Callable
) -> str:
    """One post-LN BERT layer: self-attention, add & norm, GELU FFN, add & norm."""
    # Sublayer outputs of ~15-20 (attention output std 0.3, FFN output std 1.5)
    # move the ordinary channels without disturbing the outliers.
    attention = self_attention(builder, rng, f"{prefix}.attention.self", x, mask)
    attention = _linear(
        builder, rng, f"{prefix}.attention.output.dense", attention, (HIDDEN, HIDDEN), 0.3
    )
    x = builder.node("Add", _scope(f"{prefix}.attention.output"), [attention, x])
    x = _layer_norm(builder, rng, f"{prefix}.attention.output.LayerNorm", x)

    intermediate = _linear(
        builder, rng, f"{prefix}.intermediate.dense", x, (HIDDEN, FFN), _reading_residual_std(2.0)
    )
    intermediate = _erf_gelu(builder, _scope(f"{prefix}.intermediate.intermediate_act_fn"), intermediate)
    output = _linear(builder, rng, f"{prefix}.output.dense", intermediate, (FFN, HIDDEN), 1.5)
    x = builder.node("Add", _scope(f"{prefix}.output"), [output, x])
    return _layer_norm(builder, rng, f"{prefix}.output.LayerNorm", x)


def _self_attention(
    builder: GraphBuilder,
    rng: np.random.RandomState,
    prefix: str,
    x: str,
    mask: str,
) -> str:
    """BertSelfAttention: per-head softmax(q k^T / sqrt(d) + mask) v, heads merged back."""
    scope = _scope(prefix)
    query_key_std = _reading_residual_std(1.5)
    query = _linear(builder, rng, f"{prefix}.query", x, (HIDDEN, HIDDEN), query_key_std)
    key = _linear(builder, rng, f"{prefix}.key", x, (HIDDEN, HIDDEN), query_key_std)
    value = _linear(builder, rng, f"{prefix}.value", x, (HIDDEN, HIDDEN), 0.01)  # values ~6
    heads_shape = np.array([1, SEQUENCE_LENGTH, HEADS, HEAD_DIM], dtype=np.int64)

    def split_heads(tensor: str, perm: list[int]) -> str:
        shape = builder.constant(scope, heads_shape)
        reshaped = builder.node("Reshape", scope, [tensor, shape])
        return builder.node("Transpose", scope, [reshaped], perm=perm)

    # The exporter folds `key.transpose(-1, -2)` into the head transpose: [0, 2, 3, 1].
    key_heads = split_heads(key, [0, 2, 3, 1])
    value_heads = split_heads(value, [0, 2, 1, 3])
    query_heads = split_heads(query, [0, 2, 1, 3])
    scores = builder.node("MatMul", scope, [query_heads, key_heads])
    sqrt_head_dim = builder.constant(scope, np.array(np.sqrt(HEAD_DIM), dtype=np.float32))
    scores = builder.node("Div", scope, [scores, sqrt_head_dim])
    scores = builder.node("Add", scope, [scores, mask])
    probabilities = builder.node("Softmax", scope, [scores], axis=-1)
    context = builder.node("MatMul", scope, [probabilities, value_heads])
    context = builder.node("Transpose", scope, [context], perm=[0, 2, 1, 3])
    merged_shape = builder.constant(scope, np.array([1, SEQUENCE_LENGTH, HIDDEN], dtype=np.int64))
    return builder.node("Reshape", scope, [context, merged_shape])


def _erf_gelu(builder: GraphBuilder, scope: str, x: str) -> str:
    """`x * 0.5 * (1 + erf(x / sqrt(2)))` in the exporter's order: Div, Erf, Add, Mul, Mul."""
    sqrt_two = builder.constant(scope, np.array(np.sqrt(2.0), dtype=np.float32))
    scaled = builder.node("Div", scope, [x, sqrt_two])
    erf = builder.node("Erf", scope, [scaled])
    one = builder.constant(scope, np.array(1.0, dtype=np.float32))
    shifted = builder.node("Add", scope, [erf, one])
    product = builder.node("Mul", scope, [x, shifted])
    half = builder.constant(scope, np.array(0.5, dtype=np.float32))
    return builder.node("Mul", scope, [product, half])


def _pooler(builder: GraphBuilder, rng: np.random.RandomState, hidden: str) -> str:
    """BERT's pooler: tanh(dense(hidden[:, 0])) -> `pooler_output` [1, HIDDEN]."""
    first_token = builder.constant(_scope("pooler"), np.array(0, dtype=np.int64))
    cls = builder.node("Gather", _scope("pooler"), [hidden, first_token], axis=1)
    dense = _linear(builder, rng, "pooler.dense", cls, (HIDDEN, HIDDEN), _reading_residual_std(1.0))
    return builder.node("Tanh", _scope("pooler.activation"), [dense], output_names=["pooler_output"])
