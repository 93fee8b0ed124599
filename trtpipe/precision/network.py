"""The network as TensorRT's ONNX parser sees it: named nodes, tensors, indexes.

Decision: TensorRT's ONNX parser names each layer after its ONNX node, or
`node_of_<first output>` for an unnamed node (extra layers of one node carry the
node in their metadata), so precision rules are resolved against exactly these
names. Producer and consumer indexes are built once, so every later pass is
linear in the number of nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from trtpipe.graph import input_dims
from trtpipe.graph.absorbed_nodes import read_absorbed_nodes
from trtpipe.graph.parser_names import layer_name, unique_name
from trtpipe.graph.value_info import inferred_copy

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


@dataclass
class Network:
    model: onnx.ModelProto
    names: list[str] = field(default_factory=list)  # topological order (the sanitized graph's order)
    nodes: dict[str, onnx.NodeProto] = field(default_factory=dict)
    producer: dict[str, str] = field(default_factory=dict)  # tensor -> node name
    consumers: dict[str, list[str]] = field(default_factory=dict)  # tensor -> node names
    tensor_types: dict[str, int] = field(default_factory=dict)  # elem_type of every typed tensor
    tensor_shapes: dict[str, list[int | None]] = field(default_factory=dict)  # None for unknown dims
    constants: dict[str, onnx.TensorProto] = field(default_factory=dict)  # initializers and Constant outputs
    absorbed_by: dict[str, str] = field(default_factory=dict)  # absorbed node name -> fused node name

    def op_type(self, name: str) -> str:
        return self.nodes[name].op_type

    def is_float(self, tensor: str) -> bool:
        return self.tensor_types.get(tensor) in FLOAT_TYPES

    def float_outputs(self, name: str) -> list[str]:
        return [t for t in self.nodes[name].output if t and self.is_float(t)]

    def computes_float(self, name: str) -> bool:
        """A node whose precision matters: it produces a float tensor (Casts excluded)."""
        return self.op_type(name) != "Cast" and bool(self.float_outputs(name))


def network_from_model(model: onnx.ModelProto) -> Network:
    """Index a model whose types are inferred (the sanitize stage guarantees it)."""
    inferred = inferred_copy(model)
    net = Network(model=model)
    graph = inferred.graph
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.HasField("tensor_type"):
            net.tensor_types[value.name] = value.type.tensor_type.elem_type
            if value.type.tensor_type.HasField("shape"):  # -1, 0, dim_param, empty: None (input_dims)
                net.tensor_shapes[value.name] = input_dims.dims(value)
    for tensor in model.graph.initializer:
        net.tensor_types[tensor.name] = tensor.data_type
        net.constants[tensor.name] = tensor
        net.tensor_shapes[tensor.name] = list(tensor.dims)
    for node in model.graph.node:
        name = unique_name(layer_name(node), net.nodes)
        net.names.append(name)
        net.nodes[name] = node
        for tensor in node.output:
            if tensor:
                net.producer[tensor] = name
        for tensor in node.input:
            if tensor:
                net.consumers.setdefault(tensor, []).append(name)
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                net.constants[node.output[0]] = value
                net.tensor_types[node.output[0]] = value.data_type
    for fused, absorbed in read_absorbed_nodes(model).items():
        for name in absorbed:
            net.absorbed_by[name] = fused
    return net




def name_nodes_as_parser_does(model: onnx.ModelProto) -> int:
    """Give every node the unique name TensorRT's parser would use; returns how many changed.

    Decision: written into the model so that the engine's layer names, the plan and
    the rules all use one set of names.
    """
    taken: dict[str, None] = {}
    changed = 0
    for node in model.graph.node:
        name = unique_name(layer_name(node), taken)
        taken[name] = None
        if node.name != name:
            node.name = name
            changed += 1
    return changed
