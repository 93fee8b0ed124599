"""Small hand-made graphs for the validate tests: a decomposed LayerNorm in FP16 or FP32, single ops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

FP16 = TensorProto.FLOAT16
FP32 = TensorProto.FLOAT
BF16 = TensorProto.BFLOAT16
NUMPY = {FP16: np.float16, FP32: np.float32}


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def layernorm_model(norm_type: int, io_type: int = FP16, shape=(4, 64)) -> onnx.ModelProto:
    """y = (x - mean) / sqrt(mean((x - mean)^2) + eps) over the last axis, as the exporter decomposes it.

    The norm computes in `norm_type`; with io_type FP16 and norm_type FP32 the
    LayerNorm is "kept in FP32" by Casts around it, the way a precision plan
    protects it.
    """
    dtype = NUMPY[norm_type]
    nodes, x, out = [], "x", "y"
    if norm_type != io_type:
        nodes.append(helper.make_node("Cast", ["x"], ["x_norm"], name="/norm/Cast", to=norm_type))
        x, out = "x_norm", "y_norm"
    nodes += [
        helper.make_node("ReduceMean", [x], ["mean"], name="/norm/ReduceMean", axes=[-1], keepdims=1),
        helper.make_node("Sub", [x, "mean"], ["centred"], name="/norm/Sub"),
        helper.make_node("Pow", ["centred", "two"], ["squared"], name="/norm/Pow"),
        helper.make_node("ReduceMean", ["squared"], ["variance"], name="/norm/ReduceMean_1", axes=[-1], keepdims=1),
        helper.make_node("Add", ["variance", "eps"], ["shifted"], name="/norm/Add"),
        helper.make_node("Sqrt", ["shifted"], ["std"], name="/norm/Sqrt"),
        helper.make_node("Div", ["centred", "std"], [out], name="/norm/Div"),
    ]
    if norm_type != io_type:
        nodes.append(helper.make_node("Cast", [out], ["y"], name="/norm/Cast_1", to=io_type))
    initializers = [
        numpy_helper.from_array(np.array(2.0, dtype), "two"),
        numpy_helper.from_array(np.array(1e-5, dtype), "eps"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", io_type, list(shape))],
        [helper.make_tensor_value_info("y", io_type, list(shape))],
        initializers,
        opset=13,
    )


def binary_model(op: str, elem_type: int, shape=(None,)) -> onnx.ModelProto:
    """z = op(a, b) with everything in `elem_type`."""
    return make_model(
        [helper.make_node(op, ["a", "b"], ["z"], name=f"/{op}")],
        [helper.make_tensor_value_info(name, elem_type, list(shape)) for name in ("a", "b")],
        [helper.make_tensor_value_info("z", elem_type, list(shape))],
    )


def run_ort(model: onnx.ModelProto, feeds: dict, optimize: bool = True) -> list[np.ndarray]:
    """ONNX Runtime on the CPU as a user would run it (default optimisations unless told otherwise)."""
    options = onnxruntime.SessionOptions()
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def large_deviation_input(shape=(4, 64), spread: float = 1000.0, seed: int = 0) -> np.ndarray:
    """Rows whose deviations from their mean are ~1000: (x - mean)^2 ~ 1e6, far above FP16's 65504."""
    values = np.random.RandomState(seed).normal(0.0, spread, shape)
    return values.astype(np.float16)
