"""BERT-like encoders of any depth, for the scaling series of `precision_vs_autocast.py`.

`build_encoder(layers)` is the built-in `transformer` model (trtpipe/models/transformer.py)
with `layers` post-LN layers instead of 2: the same embeddings with outlier
channels, the same FP32-min attention mask, the same decomposed LayerNorms,
attention, GELU FFN and pooler, at hidden size 64 and sequence length 16.
`build_encoder(layers, hidden=768)` builds the same encoder at BERT-base width
(12 heads of 64, FFN 3072) for timings where weights are realistic
(`python -m bench.autocast.whole_path --hidden 768`).
So every encoder has the built-in model's FP16 hazards (LayerNorm variance
overflow, mask constant), only more of them, and needs the same precision plan.

Decisions:
- The model is the built-in model's own `encoder_graph` (embeddings, layers,
  pooler), imported rather than copied, so that the series measures the model
  trtpipe ships; only the attention is written here (see next point) and
  handed to it. Those names are private to trtpipe.models.transformer:
  if one changes, this benchmark breaks loudly at import, which is the wanted
  failure (it must not drift silently).
- The batch dimension is dynamic, as `torch.onnx.export(dynamic_axes=...)`
  writes a deployable BERT: each head split and merge computes its Reshape
  target as `x.size()[:-1] + (heads, head_dim)`, i.e. Shape -> Slice -> Concat,
  which the sanitize stage's constant folding cannot fold. Besides being what
  real exports look like (an integer shape path through every layer, which a
  precision tool must leave alone), it gives the graph the precision stage
  converts about 46 nodes per layer after LayerNorm fusion; with static
  shapes it would be 34, and the 48-layer model would have ~1,650 nodes, short
  of the 2,000 the scaling series asks for.
- Deterministic to the byte: the same `np.random.RandomState` seed as the
  built-in model and weights drawn in build order.
- Width: the built-in model's width is module constants of
  trtpipe.models.transformer (`HIDDEN`, `FFN`, `HEADS`, `HEAD_DIM`), read by its
  functions when they run. Another width sets those constants for the duration
  of one build and restores them after (`_width`; a benchmark builds one model
  at a time, no threads), so trtpipe's model code is not copied or changed; at
  the default width nothing is set and the bytes are the 64-wide encoder's.
  Wider widths follow BERT-base's proportions: heads of 64, FFN 4 x hidden.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe.models import transformer
from trtpipe.models._builders import GraphBuilder
from trtpipe.models.transformer import (
    HIDDEN,
    OPSET,
    SEQUENCE_LENGTH,
    VOCAB_SIZE,
    encoder_graph,
    _linear,
    _reading_residual_std,
    _scope,
)

# Integer inputs need a spec (ids, mask) and the dynamic batch a size: batch 1.
INPUT_SPECS = {
    "input_ids": {"low": 0, "high": VOCAB_SIZE, "dtype": "int64", "shape": [1, SEQUENCE_LENGTH]},
    "attention_mask": {"low": 0, "high": 2, "dtype": "int64", "shape": [1, SEQUENCE_LENGTH]},
}


BERT_HEAD_DIM = 64  # BERT-base: 768 = 12 heads of 64, FFN 3072 = 4 x 768


def build_encoder(layers: int, hidden: int = HIDDEN) -> onnx.ModelProto:
    """A post-LN BERT-like encoder with `layers` layers and a dynamic batch (module docstring)."""
    with _width(hidden):
        return _build(layers, hidden)


@contextmanager
def _width(hidden: int):
    """trtpipe.models.transformer's width constants set to `hidden`'s for one build (module docstring)."""
    if hidden == HIDDEN:
        yield
        return
    if hidden % BERT_HEAD_DIM or hidden <= max(transformer.OUTLIER_CHANNELS):
        raise ValueError(f"hidden {hidden}: need a multiple of {BERT_HEAD_DIM} above the outlier channels")
    width = {"HIDDEN": hidden, "FFN": 4 * hidden, "HEADS": hidden // BERT_HEAD_DIM, "HEAD_DIM": BERT_HEAD_DIM}
    saved = {name: getattr(transformer, name) for name in width}
    try:
        for name, value in width.items():
            setattr(transformer, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(transformer, name, value)


def _build(layers: int, hidden: int) -> onnx.ModelProto:
    builder = encoder_graph(layers, _self_attention)
    return builder.model(
        f"bert_like_encoder_{layers}_layers",
        inputs=[
            _dynamic_batch_info("input_ids", TensorProto.INT64, [SEQUENCE_LENGTH]),
            _dynamic_batch_info("attention_mask", TensorProto.INT64, [SEQUENCE_LENGTH]),
        ],
        outputs=[
            _dynamic_batch_info("last_hidden_state", TensorProto.FLOAT, [SEQUENCE_LENGTH, hidden]),
            _dynamic_batch_info("pooler_output", TensorProto.FLOAT, [hidden]),
        ],
        opset=OPSET,
        doc_string=f"BERT-like encoder, {layers} layers, hidden {hidden}, dynamic batch (trtpipe bench)",
    )


def _dynamic_batch_info(name: str, elem_type: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, ["batch", *shape])


def _self_attention(builder: GraphBuilder, rng: np.random.RandomState, prefix: str, x: str, mask: str) -> str:
    """BertSelfAttention as exported with a dynamic batch: Reshape targets come from Shape."""
    scope = _scope(prefix)
    hidden, heads, head_dim = transformer.HIDDEN, transformer.HEADS, transformer.HEAD_DIM  # the build's width
    query_key_std = _reading_residual_std(1.5)
    query = _linear(builder, rng, f"{prefix}.query", x, (hidden, hidden), query_key_std)
    key = _linear(builder, rng, f"{prefix}.key", x, (hidden, hidden), query_key_std)
    value = _linear(builder, rng, f"{prefix}.value", x, (hidden, hidden), 0.01)

    def reshape_keeping_leading(tensor: str, drop_last: int, new_tail: list[int]) -> str:
        """`tensor.view(tensor.size()[:-drop_last] + new_tail)`: Shape -> Slice -> Concat -> Reshape."""
        shape = builder.node("Shape", scope, [tensor])
        starts = builder.constant(scope, np.array([0], dtype=np.int64))
        ends = builder.constant(scope, np.array([-drop_last], dtype=np.int64))
        axes = builder.constant(scope, np.array([0], dtype=np.int64))
        leading = builder.node("Slice", scope, [shape, starts, ends, axes])
        tail = builder.constant(scope, np.array(new_tail, dtype=np.int64))
        target = builder.node("Concat", scope, [leading, tail], axis=0)
        return builder.node("Reshape", scope, [tensor, target])

    def split_heads(tensor: str, perm: list[int]) -> str:
        reshaped = reshape_keeping_leading(tensor, 1, [heads, head_dim])
        return builder.node("Transpose", scope, [reshaped], perm=perm)

    key_heads = split_heads(key, [0, 2, 3, 1])  # key.transpose(-1, -2) folded in, as the exporter does
    value_heads = split_heads(value, [0, 2, 1, 3])
    query_heads = split_heads(query, [0, 2, 1, 3])
    scores = builder.node("MatMul", scope, [query_heads, key_heads])
    sqrt_head_dim = builder.constant(scope, np.array(np.sqrt(head_dim), dtype=np.float32))
    scores = builder.node("Div", scope, [scores, sqrt_head_dim])
    scores = builder.node("Add", scope, [scores, mask])
    probabilities = builder.node("Softmax", scope, [scores], axis=-1)
    context = builder.node("MatMul", scope, [probabilities, value_heads])
    context = builder.node("Transpose", scope, [context], perm=[0, 2, 1, 3])
    return reshape_keeping_leading(context, 2, [hidden])
