"""A DistilBERT-style encoder whose attention mask is `masked_fill(mask, -inf)` (issue 30 item 3).

Hugging Face's DistilBERT (before it moved to `finfo.min`) wrote
`scores.masked_fill((mask == 0).view(bs, 1, 1, k).expand_as(scores), -float("inf"))`;
`torch.onnx.export` gives `Equal -> Reshape -> Expand -> Where(mask, <-inf>, scores)` before the
Softmax, the -inf a scalar `Constant`. Layers alternate between that Constant and a scalar
initializer (what an exporter that folds constants writes), so both kinds of constant are covered.
Random weights; the sample inputs pad the last quarter of the sequence (attention mask 0), so
the -inf is read, and no row is masked whole (every row has real keys, as in a real batch).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models._builders import GraphBuilder, seeded_rng, tensor_info

LAYERS, HIDDEN, HEADS, FFN, VOCAB, SEQUENCE = 6, 64, 4, 256, 100, 16
HEAD = HIDDEN // HEADS


def inf_mask_encoder(seed: int = 0, mask_value: float = float("-inf")) -> tuple[onnx.ModelProto, dict]:
    """(model, feeds): input_ids, attention_mask [1, SEQUENCE] int64 -> last_hidden_state [1, SEQUENCE, HIDDEN].
    The masked_fill nodes are `/transformer/layer.<i>/attention/Where`."""
    rng = seeded_rng(seed)
    b = GraphBuilder()
    words = b.initializer("embeddings.word_embeddings.weight", rng.standard_normal([VOCAB, HIDDEN]).astype(np.float32))
    positions = b.initializer("embeddings.position_embeddings.weight",
                              (rng.standard_normal([1, SEQUENCE, HIDDEN]) * 0.1).astype(np.float32))
    hidden = b.node("Gather", "/embeddings/word_embeddings", [words, "input_ids"])
    hidden = b.node("Add", "/embeddings", [hidden, positions])
    hidden = _layer_norm(b, rng, "embeddings.LayerNorm", "/embeddings/LayerNorm", hidden)
    scope = "/transformer/layer.0/attention"
    padded = b.node("Equal", scope, ["attention_mask", b.constant(scope, np.array(0, np.int64))])
    padded = b.node("Reshape", scope, [padded, b.constant(scope, np.array([1, 1, 1, SEQUENCE], np.int64))])
    masked = b.node("Expand", scope, [padded, b.constant(scope, np.array([1, HEADS, SEQUENCE, SEQUENCE], np.int64))])
    for layer in range(LAYERS):
        fill = (b.constant(f"/transformer/layer.{layer}/attention", np.array(mask_value, np.float32)) if layer % 2 == 0
                else b.initializer(f"onnx::Where_fill_{layer}", np.array(mask_value, np.float32)))
        hidden = _layer(b, rng, layer, hidden, masked, fill)
    b.rename_tensor(hidden, "last_hidden_state")
    model = b.model("distilbert_inf_mask",
                    [tensor_info("input_ids", TensorProto.INT64, [1, SEQUENCE]),
                     tensor_info("attention_mask", TensorProto.INT64, [1, SEQUENCE])],
                    [tensor_info("last_hidden_state", TensorProto.FLOAT, [1, SEQUENCE, HIDDEN])], 17,
                    "DistilBERT-style encoder, masked_fill(-inf) attention mask")
    ids = np.random.RandomState(seed + 1).randint(0, VOCAB, size=[1, SEQUENCE]).astype(np.int64)
    mask = np.ones([1, SEQUENCE], np.int64)
    mask[:, SEQUENCE * 3 // 4:] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


def _layer(b: GraphBuilder, rng, layer: int, x: str, masked: str, fill: str) -> str:
    prefix, scope = f"transformer.layer.{layer}", f"/transformer/layer.{layer}"
    attention = f"{scope}/attention"

    def heads(tensor: str, perm: list[int]) -> str:
        split = b.node("Reshape", attention, [tensor, b.constant(attention, np.array([1, -1, HEADS, HEAD], np.int64))])
        return b.node("Transpose", attention, [split], perm=perm)

    q = heads(_linear(b, rng, f"{prefix}.attention.q_lin", f"{attention}/q_lin", x, HIDDEN, HIDDEN), [0, 2, 1, 3])
    k = heads(_linear(b, rng, f"{prefix}.attention.k_lin", f"{attention}/k_lin", x, HIDDEN, HIDDEN), [0, 2, 3, 1])
    v = heads(_linear(b, rng, f"{prefix}.attention.v_lin", f"{attention}/v_lin", x, HIDDEN, HIDDEN), [0, 2, 1, 3])
    q = b.node("Div", attention, [q, b.constant(attention, np.array(np.sqrt(HEAD), np.float32))])
    scores = b.node("MatMul", attention, [q, k])
    scores = b.node("Where", attention, [masked, fill, scores])
    weights = b.node("Softmax", attention, [scores], axis=-1)
    context = b.node("MatMul", attention, [weights, v])
    context = b.node("Transpose", attention, [context], perm=[0, 2, 1, 3])
    context = b.node("Reshape", attention, [context, b.constant(attention, np.array([1, -1, HIDDEN], np.int64))])
    out = _linear(b, rng, f"{prefix}.attention.out_lin", f"{attention}/out_lin", context, HIDDEN, HIDDEN)
    x = _layer_norm(b, rng, f"{prefix}.sa_layer_norm", f"{scope}/sa_layer_norm", b.node("Add", scope, [out, x]))
    inner = _linear(b, rng, f"{prefix}.ffn.lin1", f"{scope}/ffn/lin1", x, HIDDEN, FFN)
    inner = _erf_gelu(b, f"{scope}/ffn/activation", inner)
    out = _linear(b, rng, f"{prefix}.ffn.lin2", f"{scope}/ffn/lin2", inner, FFN, HIDDEN)
    return _layer_norm(b, rng, f"{prefix}.output_layer_norm", f"{scope}/output_layer_norm",
                       b.node("Add", scope, [out, x]))


def _linear(b: GraphBuilder, rng, prefix: str, scope: str, x: str, width: int, out: int) -> str:
    weight = b.initializer(f"{prefix}.weight.T", (rng.standard_normal([width, out]) / np.sqrt(width)).astype(np.float32))
    bias = b.initializer(f"{prefix}.bias", (rng.standard_normal(out) * 0.02).astype(np.float32))
    return b.node("Add", scope, [b.node("MatMul", scope, [x, weight]), bias])


def _layer_norm(b: GraphBuilder, rng, prefix: str, scope: str, x: str) -> str:
    weight = b.initializer(f"{prefix}.weight", (1 + rng.standard_normal(HIDDEN) * 0.05).astype(np.float32))
    bias = b.initializer(f"{prefix}.bias", (rng.standard_normal(HIDDEN) * 0.02).astype(np.float32))
    return b.node("LayerNormalization", scope, [x, weight, bias], axis=-1, epsilon=1e-12)


def _erf_gelu(b: GraphBuilder, scope: str, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))), as exported."""
    scaled = b.node("Div", scope, [x, b.constant(scope, np.array(np.sqrt(2.0), np.float32))])
    shifted = b.node("Add", scope, [b.node("Erf", scope, [scaled]), b.constant(scope, np.array(1.0, np.float32))])
    return b.node("Mul", scope, [b.node("Mul", scope, [x, shifted]), b.constant(scope, np.array(0.5, np.float32))])
