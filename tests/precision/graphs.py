"""Small graphs and inspection helpers for the precision tests."""

from __future__ import annotations

import struct

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from trtpipe.precision.network.element_types import is_lossless

RNG = np.random.default_rng(7)


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def value(name, shape, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, shape)


def weight(name, shape, scale=0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def mlp(width=8, hidden=16) -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul -> y."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="/fc1/MatMul"),
        helper.make_node("Add", ["h1", "b1"], ["h2"], name="/fc1/Add"),
        helper.make_node("Relu", ["h2"], ["h3"], name="/Relu"),
        helper.make_node("MatMul", ["h3", "w2"], ["y"], name="/fc2/MatMul"),
    ]
    weights = [weight("w1", [width, hidden]), weight("b1", [hidden]), weight("w2", [hidden, width])]
    return make_model(nodes, [value("x", [2, width])], [value("y", [2, width])], weights)


def stacked_blocks(blocks: int, width=8) -> onnx.ModelProto:
    """`blocks` x (MatMul -> Add -> Relu): 3 nodes per block."""
    nodes, weights, hidden = [], [], "x"
    for index in range(blocks):
        scope = f"/block{index}"
        nodes += [
            helper.make_node("MatMul", [hidden, f"w{index}"], [f"{scope}/mm"], name=f"{scope}/MatMul"),
            helper.make_node("Add", [f"{scope}/mm", f"b{index}"], [f"{scope}/add"], name=f"{scope}/Add"),
            helper.make_node("Relu", [f"{scope}/add"], [f"{scope}/relu"], name=f"{scope}/Relu"),
        ]
        weights += [weight(f"w{index}", [width, width]), weight(f"b{index}", [width])]
        hidden = f"{scope}/relu"
    nodes[-1].output[0] = "y"
    return make_model(nodes, [value("x", [2, width])], [value("y", [2, width])], weights)


def plan(model: onnx.ModelProto, precision: str, **overrides: str) -> dict[str, str]:
    """Every node, bodies included (by their qualified names), in `precision`, except `overrides`."""
    from trtpipe.graph.names.scopes import scoped_nodes

    result = {node.name: precision for node in model.graph.node}
    result.update({s.name: precision for s in scoped_nodes(model.graph) if s.parent is not None})
    result.update(overrides)
    return result


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return [np.asarray(output, dtype=np.float32) if output.dtype.kind == "f" else output
            for output in session.run(None, feeds)]


def sample_feeds(model: onnx.ModelProto, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value_info in model.graph.input:
        tensor_type = value_info.type.tensor_type
        shape = [dim.dim_value for dim in tensor_type.shape.dim]
        if tensor_type.elem_type == TensorProto.INT64:
            feeds[value_info.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
            feeds[value_info.name] = rng.uniform(-1, 1, shape).astype(dtype)
    return feeds


def casts(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.op_type == "Cast"]


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> element type, from a model whose value_info is inferred."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    types = {tensor.name: tensor.data_type for tensor in graph.initializer}
    for value_info in [*graph.input, *graph.value_info, *graph.output]:
        types[value_info.name] = value_info.type.tensor_type.elem_type
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            types[node.output[0]] = node.attribute[0].t.data_type
    return types


def lossless_round_trips(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(first, second) Cast pairs x -> wider -> x's own type again: casts that change no value."""
    types = element_types(model)
    producer = {output: node for node in model.graph.node for output in node.output}
    pairs = []
    for second in casts(model):
        first = producer.get(second.input[0])
        if first is None or first.op_type != "Cast":
            continue
        source_type = types[first.input[0]]
        if is_lossless(source_type, first.attribute[0].i) and second.attribute[0].i == source_type:
            pairs.append((first.name, second.name))
    return pairs


def reference_bfloat16_bits(value: float) -> int:
    """Round to nearest even by comparing the dropped half with 0x8000 (independent of the code)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if value != value:
        return (bits >> 16) | 0x40
    upper, dropped = bits >> 16, bits & 0xFFFF
    if dropped > 0x8000 or (dropped == 0x8000 and upper & 1):
        upper += 1
    return upper
