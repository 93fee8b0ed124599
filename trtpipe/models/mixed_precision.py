"""Built-in `mixed_precision`: a graph whose author already mixed FP16 and FP32 by hand.

What it reproduces (DESIGN.md problem 4): models that arrive with Cast chains
around the parts their author kept in FP32 (here an L2 norm: Pow -> ReduceSum ->
Sqrt -> Div) and FP16 everywhere else, plus an ordinary FP32 head that nobody
tuned. A precision tool must respect the existing Casts and the FP32 norm (its
ReduceSum reaches ~10^5, which would overflow FP16), may convert the FP32 head,
and must not add Casts where the author's already are.

Layout, for block0 and block1 (input and output are float32 [1, 8, 32]):

    Cast(FP16) -> proj MatMul+Add (FP16 weights) -> Cast(FP32)
      -> norm: Pow(2) -> ReduceSum(-1) -> Add(eps) -> Sqrt -> Div      (FP32)
      -> Cast(FP16) -> out MatMul+Add (FP16) -> residual Add (FP16) -> Cast(FP32)

then the FP32 head: fc1 MatMul+Add -> Relu -> fc2 MatMul+Add -> residual Add.
Between the blocks the author's Casts form a chain FP16 -> FP32 -> FP16, as
they do when blocks are tuned one at a time.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models._builders import GraphBuilder, module_scope, seeded_rng, tensor_info

OPSET = 17
SEED = 1717
TOKENS = 8
WIDTH = 32
HEAD_WIDTH = 64
BLOCKS = 2
NORM_EPS = 1e-6
# Projection weights large enough that the sum of squares in the norm
# (~32 * 50^2 = 80000) exceeds FP16's 65504: the reason the author kept it FP32.
PROJECTION_WEIGHT_STD = 15.0


def build_mixed_precision() -> onnx.ModelProto:
    """The graph as described in the module docstring; deterministic to the byte."""
    rng = seeded_rng(SEED)
    builder = GraphBuilder()
    hidden = "x"
    for index in range(BLOCKS):
        hidden = _hand_tuned_block(builder, rng, f"block{index}", hidden)
    _fp32_head(builder, rng, hidden)
    return builder.model(
        "hand_tuned_mixed_precision",
        inputs=[tensor_info("x", TensorProto.FLOAT, [1, TOKENS, WIDTH])],
        outputs=[tensor_info("y", TensorProto.FLOAT, [1, TOKENS, WIDTH])],
        opset=OPSET,
        doc_string=__doc__.split("\n\n")[0],
    )


def _linear(
    builder: GraphBuilder,
    rng: np.random.RandomState,
    prefix: str,
    x: str,
    shape: tuple[int, int],
    std: float,
    dtype: type,
) -> str:
    """MatMul with `<prefix>.weight` [in, out] then Add `<prefix>.bias`, weights stored in `dtype`."""
    weight = builder.initializer(f"{prefix}.weight", rng.normal(0.0, std, shape).astype(dtype))
    bias = builder.initializer(f"{prefix}.bias", rng.normal(0.0, 0.05, shape[1]).astype(dtype))
    product = builder.node("MatMul", module_scope(prefix), [x, weight])
    return builder.node("Add", module_scope(prefix), [product, bias])


def _hand_tuned_block(builder: GraphBuilder, rng: np.random.RandomState, name: str, x: str) -> str:
    scope = f"/{name}"
    x_half = builder.node("Cast", f"{scope}/to_fp16", [x], to=TensorProto.FLOAT16)
    projected = _linear(
        builder, rng, f"{name}.proj", x_half, (WIDTH, WIDTH), PROJECTION_WEIGHT_STD, np.float16
    )
    projected = builder.node("Cast", f"{scope}/to_fp32", [projected], to=TensorProto.FLOAT)
    normalised = _l2_norm(builder, f"{scope}/norm", projected)
    normalised = builder.node("Cast", f"{scope}/norm_to_fp16", [normalised], to=TensorProto.FLOAT16)
    out = _linear(builder, rng, f"{name}.out", normalised, (WIDTH, WIDTH), 1.0, np.float16)
    out = builder.node("Add", scope, [out, x_half])
    return builder.node("Cast", f"{scope}/to_fp32_out", [out], to=TensorProto.FLOAT)


def _l2_norm(builder: GraphBuilder, scope: str, x: str) -> str:
    """x / sqrt(sum(x^2) + eps) over the last axis, all in FP32."""
    two = builder.constant(scope, np.array(2.0, dtype=np.float32))
    squared = builder.node("Pow", scope, [x, two])
    last_axis = builder.constant(scope, np.array([-1], dtype=np.int64))
    total = builder.node("ReduceSum", scope, [squared, last_axis], keepdims=1)
    eps = builder.constant(scope, np.array(NORM_EPS, dtype=np.float32))
    shifted = builder.node("Add", scope, [total, eps])
    norm = builder.node("Sqrt", scope, [shifted])
    return builder.node("Div", scope, [x, norm])


def _fp32_head(builder: GraphBuilder, rng: np.random.RandomState, x: str) -> str:
    """An untuned FP32 MLP with a residual: the part a precision tool may still convert."""
    hidden = _linear(builder, rng, "head.fc1", x, (WIDTH, HEAD_WIDTH), 1.0 / np.sqrt(WIDTH), np.float32)
    hidden = builder.node("Relu", "/head", [hidden])
    hidden = _linear(
        builder, rng, "head.fc2", hidden, (HEAD_WIDTH, WIDTH), 1.0 / np.sqrt(HEAD_WIDTH), np.float32
    )
    return builder.node("Add", "/head", [hidden, x], output_names=["y"])
