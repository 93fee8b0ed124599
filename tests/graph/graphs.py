"""Small hand-made ONNX graphs for the graph-pass tests, and an ONNX Runtime runner."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

LN_SCOPE = "/encoder/layer.0/attention/output/LayerNorm"


def make_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def float_input(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    # Numerics of the graph as written, not of ORT's own fusions.
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def random_input(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3 + 1


def foldable_graph(shuffled: bool = False) -> onnx.ModelProto:
    """y = x * (a + b) + Shape-independent constants; plus a dead Relu branch."""
    a = numpy_helper.from_array(np.full((3,), 2.0, np.float32), "a")
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "target_shape")
    nodes = [
        helper.make_node("Add", ["a", "b"], ["a_plus_b"], name="/const/Add"),
        helper.make_node("Mul", ["x", "a_plus_b"], ["scaled"], name="/Mul"),
        helper.make_node("Reshape", ["scaled", "target_shape"], ["y"], name="/Reshape"),
        helper.make_node("Relu", ["x"], ["dead"], name="/dead/Relu"),
    ]
    if shuffled:
        nodes = [nodes[2], nodes[3], nodes[1], nodes[0]]
    return make_model(
        nodes, [float_input("x", [2, 3])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [a, b, shape], opset=14,
    )


def layernorm_graph(
    shape=(2, 5, 8),
    axes=(-1,),
    opset: int = 17,
    affine: bool = True,
    constants_as_nodes: bool = False,
    gamma_shape=None,
    scope: str = LN_SCOPE,
    mean_also_used: bool = False,
    swapped: bool = False,
) -> onnx.ModelProto:
    """The decomposed LayerNorm as torch exports it, followed by a Relu consumer.

    `swapped` writes the commutative Add/Mul operands the other way round.
    """

    def ordered(a, b):
        return [b, a] if swapped else [a, b]

    rank = len(shape)
    normalized = [shape[axis % rank] for axis in axes]
    gamma_shape = gamma_shape or normalized
    rng = np.random.default_rng(1)
    values = {
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "gamma": rng.uniform(0.5, 1.5, gamma_shape).astype(np.float32),
        "beta": rng.uniform(-0.5, 0.5, gamma_shape).astype(np.float32),
    }
    initializers, nodes = [], []
    for name, value in values.items():
        if constants_as_nodes and name in ("two", "eps"):
            nodes.append(helper.make_node("Constant", [], [name], name=f"{scope}/Constant_{name}",
                                          value=numpy_helper.from_array(value, name)))
        else:
            initializers.append(numpy_helper.from_array(value, name))

    def reduce_mean(source, output, suffix):
        if opset >= 18:
            initializers.append(numpy_helper.from_array(np.array(axes, np.int64), f"axes{suffix}"))
            return helper.make_node("ReduceMean", [source, f"axes{suffix}"], [output],
                                    name=f"{scope}/ReduceMean{suffix}", keepdims=1)
        return helper.make_node("ReduceMean", [source], [output], name=f"{scope}/ReduceMean{suffix}",
                                axes=list(axes), keepdims=1)

    nodes += [
        reduce_mean("x", "mean", ""),
        helper.make_node("Sub", ["x", "mean"], ["centered"], name=f"{scope}/Sub"),
        helper.make_node("Pow", ["centered", "two"], ["squared"], name=f"{scope}/Pow"),
        reduce_mean("squared", "variance", "_1"),
        helper.make_node("Add", ordered("variance", "eps"), ["variance_eps"], name=f"{scope}/Add"),
        helper.make_node("Sqrt", ["variance_eps"], ["std"], name=f"{scope}/Sqrt"),
        helper.make_node("Div", ["centered", "std"], ["normalized"], name=f"{scope}/Div"),
    ]
    last = "normalized"
    if affine:
        nodes += [
            helper.make_node("Mul", ordered("normalized", "gamma"), ["scaled"], name=f"{scope}/Mul"),
            helper.make_node("Add", ordered("scaled", "beta"), ["ln_out"], name=f"{scope}/Add_1"),
        ]
        last = "ln_out"
    else:
        initializers = [t for t in initializers if t.name not in ("gamma", "beta")]
    nodes.append(helper.make_node("Relu", [last], ["y"], name="/encoder/Relu"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if mean_also_used:
        nodes.append(helper.make_node("Neg", ["mean"], ["neg_mean"], name="/other/Neg"))
        mean_shape = [1 if (axis - rank if axis >= 0 else axis) in [a - rank if a >= 0 else a for a in axes]
                      else dim for axis, dim in enumerate(shape)]
        outputs.append(helper.make_tensor_value_info("neg_mean", TensorProto.FLOAT, mean_shape))
    return make_model(nodes, [float_input("x", shape)], outputs, initializers, opset=opset)


def layernorm2d_graph(opset: int = 17) -> onnx.ModelProto:
    """Channel-wise LayerNorm of NCHW (ConvNeXt/NAFNet style): reduces over axis 1."""
    return layernorm_graph(shape=(1, 4, 3, 3), axes=(1,), opset=opset, gamma_shape=[1, 4, 1, 1],
                           scope="/stem/LayerNorm2d")
