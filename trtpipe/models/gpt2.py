"""Built-in `gpt2`: a GPT-2-style decoder (causal LM) whose residual stream has massive channels.

What it reproduces: Hugging Face's `GPT2LMHeadModel` as `torch.onnx.export`
writes it at opset 14, input `input_ids` only, output `logits` [1, S, vocab]:

- position ids from an in-graph `Range`, token + position embeddings;
- pre-LayerNorm blocks (`ln_1` -> attention -> residual Add, `ln_2` -> MLP ->
  residual Add), LayerNorms decomposed (opset < 17), final `ln_f`;
- `Conv1D` layers exported as Reshape -> Gemm(bias) -> Reshape; the fused
  `c_attn` projection is Split into q, k, v;
- causal self-attention with the mask built in-graph: `Range`s of query and key
  positions, `GreaterOrEqual`, then `Where(causal, 0, finfo(float32).min)` added
  to the scaled scores (what `_prepare_4d_causal_attention_mask` exports);
- tanh GELU MLP (`gelu_new`) and a tied LM head: the exporter folds
  `wte.weight^T` into its own MatMul initializer.

FP16 trouble, and which scale reproduces it:
- `MASSIVE_MLP_OUTPUT`: the MLP's `c_proj` writes one "massive activation"
  channel (GPT-2 small has channels of ~3000 in its residual stream): the
  residual reaches ~3e3, every LayerNorm's `Pow(x - mean, 2)` (~1e7) overflows
  FP16, and the residual Adds hold values where FP16 loses small updates.
- The causal mask constant -3.4e38 is -inf in FP16.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models.catalog import DECODER_VOCAB_SIZE
from trtpipe.models._builders import (
    GraphBuilder,
    add_decomposed_layer_norm,
    add_tanh_gelu,
    module_scope,
    seeded_rng,
    tensor_info,
)

OPSET = 14
SEED = 1402
VOCAB_SIZE = DECODER_VOCAB_SIZE
SEQUENCE_LENGTH = 16
N_EMBD = 64
HEADS = 4
HEAD_DIM = N_EMBD // HEADS
N_INNER = 4 * N_EMBD
LAYERS = 4
LAYER_NORM_EPS = 1e-5  # GPT-2's value
FLOAT32_MIN = -3.4028234663852886e38

MASSIVE_CHANNEL = 23
# What each layer's MLP adds to the massive channel (about): the stream reaches ~3e3.
MASSIVE_MLP_OUTPUT = (400.0, 900.0, 900.0, 600.0)


def build_gpt2() -> onnx.ModelProto:
    """The decoder as described in the module docstring; deterministic to the byte."""
    rng = seeded_rng(SEED)
    builder = GraphBuilder()
    words = rng.normal(0.0, 0.5, (VOCAB_SIZE, N_EMBD)).astype(np.float32)
    wte = builder.initializer("transformer.wte.weight", words)
    wpe = builder.initializer(
        "transformer.wpe.weight", rng.normal(0.0, 0.2, (SEQUENCE_LENGTH, N_EMBD)).astype(np.float32)
    )
    scope = _scope("transformer")
    positions = _positions(builder, scope)
    position_ids = builder.node("Unsqueeze", scope, [positions, _const(builder, scope, [0], np.int64)])
    hidden = builder.node("Add", scope, [
        builder.node("Gather", _scope("transformer.wte"), [wte, "input_ids"]),
        builder.node("Gather", _scope("transformer.wpe"), [wpe, position_ids]),
    ])
    mask = _causal_mask(builder, scope)
    for index in range(LAYERS):
        hidden = _block(builder, rng, index, hidden, mask)
    hidden = _layer_norm(builder, rng, "transformer.ln_f", hidden)
    head = builder.initializer("lm_head.weight_transposed", np.ascontiguousarray(words.T))
    builder.node("MatMul", _scope("lm_head"), [hidden, head], output_names=["logits"])
    return builder.model(
        "gpt2_like_decoder",
        inputs=[tensor_info("input_ids", TensorProto.INT64, [1, SEQUENCE_LENGTH])],
        outputs=[tensor_info("logits", TensorProto.FLOAT, [1, SEQUENCE_LENGTH, VOCAB_SIZE])],
        opset=OPSET,
        doc_string=__doc__.split("\n\n")[0],
    )


def _scope(qualified_name: str) -> str:
    return module_scope(qualified_name, module_lists=("transformer.h",))


def _const(builder: GraphBuilder, scope: str, value, dtype) -> str:
    return builder.constant(scope, np.array(value, dtype=dtype))


def _positions(builder: GraphBuilder, scope: str) -> str:
    start, step = _const(builder, scope, 0, np.int64), _const(builder, scope, 1, np.int64)
    return builder.node("Range", scope, [start, _const(builder, scope, SEQUENCE_LENGTH, np.int64), step])


def _causal_mask(builder: GraphBuilder, scope: str) -> str:
    """[1, 1, S, S] additive mask: 0 where key position <= query position, finfo(float32).min elsewhere."""
    query = builder.node("Unsqueeze", scope, [_positions(builder, scope), _const(builder, scope, [1], np.int64)])
    key = builder.node("Unsqueeze", scope, [_positions(builder, scope), _const(builder, scope, [0], np.int64)])
    causal = builder.node("GreaterOrEqual", scope, [query, key])
    zero = _const(builder, scope, 0.0, np.float32)
    mask = builder.node("Where", scope, [causal, zero, _const(builder, scope, FLOAT32_MIN, np.float32)])
    return builder.node("Unsqueeze", scope, [mask, _const(builder, scope, [0, 1], np.int64)])


def _layer_norm(builder: GraphBuilder, rng: np.random.RandomState, prefix: str, x: str) -> str:
    weight = builder.initializer(f"{prefix}.weight", rng.uniform(0.8, 1.2, N_EMBD).astype(np.float32))
    bias = builder.initializer(f"{prefix}.bias", rng.normal(0.0, 0.05, N_EMBD).astype(np.float32))
    return add_decomposed_layer_norm(builder, _scope(prefix), x, weight, bias, -1, LAYER_NORM_EPS)


def _conv1d(builder, prefix: str, x: str, weight: np.ndarray, bias: np.ndarray, rows: int) -> str:
    """GPT-2's `Conv1D` (addmm on the flattened tokens) as exported: Reshape, Gemm, Reshape."""
    scope = _scope(prefix)
    w = builder.initializer(f"{prefix}.weight", weight.astype(np.float32))
    b = builder.initializer(f"{prefix}.bias", bias.astype(np.float32))
    flat = builder.node("Reshape", scope, [x, _const(builder, scope, [-1, weight.shape[0]], np.int64)])
    product = builder.node("Gemm", scope, [flat, w, b], alpha=1.0, beta=1.0)
    return builder.node("Reshape", scope, [product, _const(builder, scope, [1, rows, weight.shape[1]], np.int64)])


def _block(builder, rng, index: int, hidden: str, mask: str) -> str:
    prefix = f"transformer.h.{index}"
    normed = _layer_norm(builder, rng, f"{prefix}.ln_1", hidden)
    attention = _attention(builder, rng, f"{prefix}.attn", normed, mask)
    hidden = builder.node("Add", _scope(prefix), [attention, hidden])
    normed = _layer_norm(builder, rng, f"{prefix}.ln_2", hidden)
    mlp = _mlp(builder, rng, f"{prefix}.mlp", normed, MASSIVE_MLP_OUTPUT[index])
    return builder.node("Add", _scope(prefix), [hidden, mlp])


def _attention(builder, rng, prefix: str, x: str, mask: str) -> str:
    scope = _scope(prefix)
    qkv = _conv1d(
        builder, f"{prefix}.c_attn", x,
        rng.normal(0.0, 1.5 / math.sqrt(N_EMBD), (N_EMBD, 3 * N_EMBD)),
        rng.normal(0.0, 0.02, 3 * N_EMBD), SEQUENCE_LENGTH,
    )
    split = _const(builder, scope, [N_EMBD, N_EMBD, N_EMBD], np.int64)
    query, key, value = builder.node("Split", scope, [qkv, split], num_outputs=3, axis=2)

    def heads(tensor: str, perm: list[int]) -> str:
        shape = _const(builder, scope, [1, SEQUENCE_LENGTH, HEADS, HEAD_DIM], np.int64)
        return builder.node("Transpose", scope, [builder.node("Reshape", scope, [tensor, shape])], perm=perm)

    scores = builder.node("MatMul", scope, [heads(query, [0, 2, 1, 3]), heads(key, [0, 2, 3, 1])])
    scores = builder.node("Div", scope, [scores, _const(builder, scope, math.sqrt(HEAD_DIM), np.float32)])
    scores = builder.node("Add", scope, [scores, mask])
    weights = builder.node("Softmax", scope, [scores], axis=-1)
    context = builder.node("MatMul", scope, [weights, heads(value, [0, 2, 1, 3])])
    context = builder.node("Transpose", scope, [context], perm=[0, 2, 1, 3])
    merged = builder.node("Reshape", scope, [context, _const(builder, scope, [1, SEQUENCE_LENGTH, N_EMBD], np.int64)])
    return _conv1d(
        builder, f"{prefix}.c_proj", merged,
        rng.normal(0.0, 1.0 / math.sqrt(N_EMBD), (N_EMBD, N_EMBD)),
        rng.normal(0.0, 0.02, N_EMBD), SEQUENCE_LENGTH,
    )


def _mlp(builder, rng, prefix: str, x: str, massive_output: float) -> str:
    """c_fc -> gelu_new -> c_proj, with c_proj writing `massive_output` into MASSIVE_CHANNEL."""
    inner = _conv1d(
        builder, f"{prefix}.c_fc", x,
        rng.normal(0.0, 2.0 / math.sqrt(N_EMBD), (N_EMBD, N_INNER)),
        rng.normal(0.0, 0.02, N_INNER), SEQUENCE_LENGTH,
    )
    inner = add_tanh_gelu(builder, _scope(f"{prefix}.act"), inner)
    out_weight = rng.normal(0.0, 1.0 / math.sqrt(N_INNER), (N_INNER, N_EMBD))
    # gelu(a) for a ~ N(0, 2^2) has mean ~0.8: positive weights give a same-sign output on every token.
    out_weight[:, MASSIVE_CHANNEL] = rng.uniform(0.5, 1.5, N_INNER) * massive_output / (0.8 * N_INNER)
    return _conv1d(builder, f"{prefix}.c_proj", inner, out_weight, rng.normal(0.0, 0.02, N_EMBD), SEQUENCE_LENGTH)

