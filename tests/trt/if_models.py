"""A small model with an If whose branches hold a MatMul, an activation and an Add reading an
outer-scope tensor: what the TensorRT-RTX audit of body nodes is tested on (issue 32, item 15).

The recorded parser logs in tests/trt/data/rtx_if/ come from this model through trtpipe
(sanitize, upgrade_opset, precision) and the real TensorRT-RTX 1.7.1 parser (bench/rtx), twice:
`fp32_matmul` with `precision.rules.mm` keeping the then-branch MatMul FP32 (THEN_MATMUL_FP32),
`all_fp16` without it. `python -m tests.trt.if_models DIR` writes the model to DIR/if_model.onnx.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The override that keeps the then-branch MatMul FP32 (sanitize names it if/then_branch/then_matmul).
THEN_MATMUL_FP32 = '+precision.rules.mm={match: regex, pattern: ".*then_matmul", precision: fp32}'
THEN_MATMUL = "if/then_branch/then_matmul"


def _branch(tag: str, op: str, rng) -> onnx.GraphProto:
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), f"{tag}_w")
    nodes = [helper.make_node("MatMul", ["h", f"{tag}_w"], [f"{tag}_mm"], name=f"{tag}_matmul"),
             helper.make_node(op, [f"{tag}_mm"], [f"{tag}_act"], name=f"{tag}_act"),
             helper.make_node("Add", [f"{tag}_act", "h"], [f"{tag}_out"], name=f"{tag}_add")]
    out = helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT, [4, 16])
    return helper.make_graph(nodes, f"{tag}_branch", [], [out], [w])


def if_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    inits = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w0"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=_branch("then", "Relu", rng),
                              else_branch=_branch("else", "Sigmoid", rng))]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(if_model(), folder / "if_model.onnx")
