"""The network as TensorRT's ONNX parser sees it: named nodes, tensors, indexes.

Decision: TensorRT's ONNX parser names each layer after its ONNX node, or
`node_of_<first output>` for an unnamed node (extra layers of one node carry the
node in their metadata), so precision rules are resolved against exactly these
names. Producer and consumer indexes are built once, so every later pass is
linear in the number of nodes.

Decision: nodes inside If/Loop/Scan bodies are nodes of the network like any
other (graph/names/scopes.py names them `<control node>/<attribute>/<node>` and
orders them right before their control-flow node). Tensors keep their ONNX
names (unique across scopes once `rename_sibling_collisions` ran), so
`consumers` lists a body node under the outer-scope tensor it reads (an
implicit input of its control-flow node) and `producer`, `tensor_types` and
`tensor_shapes` cover body tensors too. `parent` and `bodies` say where a
node lives.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import onnx

from trtpipe.onnxmodel import input_dims
from trtpipe.graph.names.absorbed_nodes import read_absorbed_nodes
from trtpipe.graph.names.scopes import CONTROL_FLOW_OPS, name_all_nodes, rename_sibling_collisions, scoped_nodes
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.onnxmodel.value_info import inferred_copy

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
    parent: dict[str, str] = field(default_factory=dict)  # body node -> the control-flow node holding it
    bodies: dict[str, list[str]] = field(default_factory=dict)  # control-flow node -> its body nodes (direct)
    repeat_depth: dict[str, int] = field(default_factory=dict)  # body node -> enclosing Loop/Scan bodies
    # Shapes the sample data actually gives (flop_shapes.py): tensor -> per-iteration shape,
    # and how many times the node producing it ran (Loop/Scan trips; 0: an If branch not taken).
    run_shapes: dict[str, list[int]] = field(default_factory=dict)
    run_counts: dict[str, int] = field(default_factory=dict)
    run_levels: dict[str, int] = field(default_factory=dict)  # body tensor -> leading iteration axes in a run
    # The stored-tensor check's materialisation, reused by the stage for the same plan (materialize_reuse.py).
    last_materialised: object = field(default=None, repr=False, compare=False)
    # inferred_copy(model) as indexed here (weightless): the reference run reads its types (auto_range.py).
    inferred: onnx.ModelProto | None = field(default=None, repr=False, compare=False)

    def op_type(self, name: str) -> str:
        return self.nodes[name].op_type

    @functools.cached_property
    def position(self) -> dict[str, int]:
        """node name -> its index in `names` (the topological order), built once."""
        return {name: index for index, name in enumerate(self.names)}

    def neighbours(self, name: str) -> list[str]:
        """The nodes producing `name`'s inputs, then those reading its outputs (graph edges both ways)."""
        node = self.nodes[name]
        found = [self.producer[t] for t in node.input if t in self.producer]
        return found + [c for t in node.output for c in self.consumers.get(t, [])]

    def tensors_read_in_bodies(self) -> set[str]:
        """Tensors read by nodes inside If/Loop/Scan bodies (outer-scope reads included)."""
        return {t for n in self.names if n in self.parent for t in self.nodes[n].input if t}

    def is_float(self, tensor: str) -> bool:
        return self.tensor_types.get(tensor) in FLOAT_TYPES

    def float_outputs(self, name: str) -> list[str]:
        return [t for t in self.nodes[name].output if t and self.is_float(t)]

    def computes_float(self, name: str) -> bool:
        """A node whose precision matters: it produces a float tensor (Casts excluded)."""
        return self.op_type(name) != "Cast" and bool(self.float_outputs(name))

    def is_control_flow(self, name: str) -> bool:
        return self.op_type(name) in CONTROL_FLOW_OPS and name in self.bodies

    def body_descendants(self, name: str) -> list[str]:
        """Every node inside the bodies of `name`, nested bodies included, in network order."""
        if name not in self.bodies:
            return []  # most nodes: no per-call cost beyond this lookup
        found, stack = [], list(self.bodies[name])
        while stack:
            inner = stack.pop()
            found.append(inner)
            stack.extend(self.bodies.get(inner, ()))
        order = {n: i for i, n in enumerate(self.names)}
        return sorted(found, key=order.__getitem__)


def network_from_model(model: onnx.ModelProto) -> Network:
    """Index a model whose types are inferred (the sanitize stage guarantees it)."""
    inferred = inferred_copy(model)
    net = Network(model=model, inferred=inferred)
    for graph in all_graphs(inferred.graph):
        for value in list(graph.input) + list(graph.output) + list(graph.value_info):
            if value.type.HasField("tensor_type"):
                net.tensor_types[value.name] = value.type.tensor_type.elem_type
                if value.type.tensor_type.HasField("shape"):
                    net.tensor_shapes[value.name] = input_dims.dims(value)  # -1, 0, dim_param, empty: None
    for graph in all_graphs(model.graph):
        for tensor in graph.initializer:
            net.tensor_types[tensor.name] = tensor.data_type
            net.constants[tensor.name] = tensor
            net.tensor_shapes[tensor.name] = list(tensor.dims)
    for scoped in scoped_nodes(model.graph):
        name, node = scoped.name, scoped.node
        net.names.append(name)
        net.nodes[name] = node
        if scoped.parent is not None:
            net.parent[name] = scoped.parent
            net.bodies.setdefault(scoped.parent, []).append(name)
            net.repeat_depth[name] = scoped.repeat_depth
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
    the rules all use one set of names. Body nodes get their qualified name
    (graph/names/scopes.py), and body-local tensor names that sibling scopes share are made
    unique first, so every tensor name means one tensor.
    """
    rename_sibling_collisions(model.graph)
    return name_all_nodes(model)
