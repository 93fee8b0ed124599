"""A tiny mixed-precision model and its plan, as the precision stage would hand them to build:
x (FP32) -> LayerNormalization (FP32) -> Cast FP16 -> MatMul (FP16) -> Cast FP32 -> y."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NODES = {"/ln/LayerNormalization": ("LayerNormalization", "fp32"), "/to_fp16/Cast": ("Cast", "keep"),
         "/proj/MatMul": ("MatMul", "fp16"), "/to_fp32/Cast": ("Cast", "keep")}


def tiny_model(batch: int | str = 1) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16, 64])
    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(np.ones(64, np.float32), "scale"),
             numpy_helper.from_array(np.zeros(64, np.float32), "bias"),
             numpy_helper.from_array(rng.randn(64, 64).astype(np.float16), "w")]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln_out"], "/ln/LayerNormalization", axis=-1),
        helper.make_node("Cast", ["ln_out"], ["h16"], "/to_fp16/Cast", to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["h16", "w"], ["m16"], "/proj/MatMul"),
        helper.make_node("Cast", ["m16"], ["y"], "/to_fp32/Cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "tiny", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def tiny_plan() -> dict:
    return {"format": 1, "default": "fp16", "rules": {}, "rules_via_fusion": {},
            "nodes": [{"name": name, "op_type": op, "precision": precision, "reason": "test", "source": "test"}
                      for name, (op, precision) in NODES.items()],
            "totals": {"nodes": {"fp16": 1, "fp32": 1, "keep": 2}}}


def write_inputs(directory: Path, batch: int | str = 1) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(tiny_model(batch), str(directory / "model.onnx"))
    (directory / "precision_plan.json").write_text(json.dumps(tiny_plan(), indent=2) + "\n")
    return {"model": directory / "model.onnx", "plan": directory / "precision_plan.json"}
