"""A LayerNorm as tf2onnx writes it (its rewriter tf2onnx/rewriter/layer_normalization_rewriter.py, read,
not copied): a TF LayerNorm over the last axis of a rank-3 tensor becomes InstanceNormalization with a
scale of ones and a bias of zeros made by `ConstantOfShape(Slice(Shape(x), 1:2))`, then `Mul(gamma)`,
`Add(beta)`; a MatMul reads the result, as the next layer would."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = 16


def _fill(value: float) -> onnx.TensorProto:
    return helper.make_tensor("value", TensorProto.FLOAT, dims=[1], vals=[value])


def instance_norm_layernorm(epsilon: float = 1e-3, scale_fill: float = 1.0, bias_fill: float = 0.0,
                            folded: bool = False, seq: int | str = "seq", opset: int = 17) -> onnx.ModelProto:
    """x [batch, seq, CHANNELS] -> tf2onnx's InstanceNormalization LayerNorm -> MatMul -> y. `folded`: the
    ones and zeros as initializers of [seq] (what sanitize's constant folding leaves when seq is static)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(CHANNELS).astype(np.float32), "ln/gamma"),
             numpy_helper.from_array(rng.standard_normal(CHANNELS).astype(np.float32), "ln/beta"),
             numpy_helper.from_array((rng.standard_normal([CHANNELS, CHANNELS]) / 4).astype(np.float32), "dense/w")]
    nodes = []
    if folded:
        inits += [numpy_helper.from_array(np.full([seq], scale_fill, np.float32), "ln/ones"),
                  numpy_helper.from_array(np.full([seq], bias_fill, np.float32), "ln/zeros")]
    else:
        inits += [numpy_helper.from_array(np.array([value], np.int64), name)
                  for name, value in (("ln/starts", 1), ("ln/ends", 2), ("ln/axes", 0))]
        nodes += [helper.make_node("Shape", ["x"], ["ln/shape"], name="ln/Shape"),
                  helper.make_node("Slice", ["ln/shape", "ln/starts", "ln/ends", "ln/axes"], ["ln/dim1"],
                                   name="ln/Slice"),
                  helper.make_node("ConstantOfShape", ["ln/dim1"], ["ln/zeros"], name="ln/ConstantOfShape",
                                   value=_fill(bias_fill)),
                  helper.make_node("ConstantOfShape", ["ln/dim1"], ["ln/ones"], name="ln/ConstantOfShape_1",
                                   value=_fill(scale_fill))]
    nodes += [helper.make_node("InstanceNormalization", ["x", "ln/ones", "ln/zeros"], ["ln/normed"],
                               name="ln/add_1/InstanceNormalization", epsilon=epsilon),
              helper.make_node("Mul", ["ln/normed", "ln/gamma"], ["ln/scaled"], name="ln/Mul"),
              helper.make_node("Add", ["ln/scaled", "ln/beta"], ["ln/out"], name="ln/Add"),
              helper.make_node("MatMul", ["ln/out", "dense/w"], ["y"], name="dense/MatMul")]
    graph = helper.make_graph(nodes, "tf2onnx_layernorm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, CHANNELS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, CHANNELS])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
