"""Decide the types of weights and graph inputs from what their consumers need.

A weight has no precision of its own: it is stored in the type its consumers
read it in, so no Cast runs on it at inference time. "Weights" here are:

- float initializers (not listed as graph inputs: those can be fed by the user);
- the values of float Constant nodes (not marked `keep`);
- the outputs of Identity/Reshape/Transpose/Squeeze/Unsqueeze/Flatten/Expand
  chains whose data input is a weight: they follow the node that finally uses them,
  whatever precision the plan gave the chain itself, because they only move
  values and TensorRT folds them into the weight.

Decisions:
- A consumer's *exact* need is a demand; a consumer that accepts several
  types (Resize `roi`, Pow's exponent, a Cast's input) makes none and reads
  whatever is there, so such weights stay as authored (see node_types.py).
- An initializer or Constant is converted in place when all demands agree;
  when they differ, it gets one copy per demanded type: the authored type (if
  demanded) keeps the original name, the others are named `<name>/<fp16|...>`.
- A chain node or a graph input (`keep_io_types=False`) has one output, so it
  takes the demanded type when all demands agree and keeps its authored type
  otherwise; the consumers that disagree get a Cast (see casts.py). Copying
  whole chains per type was judged not worth its complexity: such weights are
  rare, and TensorRT folds the Cast of a constant at build time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import KEEP, RETYPABLE, short_name
from trtpipe.precision.network.graph_index import GraphIndex, UniqueNames
from trtpipe.precision.materialize.node_types import NodeTypes, exactly

# Expand too: it only repeats values, and the planner (passthrough.py) looks through it as well.
WEIGHT_PASSTHROUGH_OPS = frozenset(
    {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand"}
)
FLOAT_CONSTANT_ATTRIBUTES = frozenset({"value", "value_float", "value_floats"})


@dataclass
class WeightTypes:
    """Where each weight (and chosen graph input) is available, by type: tensor -> {type: name}.

    The first entry of each inner dict is the primary one: the type the
    tensor's own name carries. `copies` lists (weight, type, name) for every
    stored conversion to make, in deterministic order.
    """

    available: dict[str, dict[int, str]] = field(default_factory=dict)
    copies: list[tuple[str, int, str]] = field(default_factory=list)
    constant_nodes: dict[str, int] = field(default_factory=dict)  # weight -> Constant node position
    chain_nodes: list[int] = field(default_factory=list)


def decide_weight_types(
    graph: onnx.GraphProto,
    index: GraphIndex,
    decided: list[NodeTypes],
    precisions: list[str],
    types: dict[str, int],
    keep_io_types: bool,
    names: UniqueNames,
    body_needs: dict[str, list[int]] | None = None,
) -> WeightTypes:
    """Choose weight and graph-input types; overrides `decided` for chain nodes in place.

    `body_needs`: the exact types If/Loop/Scan bodies read tensors of this graph in
    (body_demands.py); without it, a body is assumed to read the authored type."""
    result = WeightTypes()
    roots = _root_weights(graph, index, precisions, types, result)
    chain_nodes = _passthrough_chain(graph, precisions, types, set(roots))
    result.chain_nodes = chain_nodes

    def demands(tensor: str) -> list[int]:
        return _exact_demands(tensor, index, decided, types, keep_io_types, body_needs)

    # Consumers before producers: a chain node's demand on its input is its own chosen type.
    for position in reversed(chain_nodes):
        node = graph.node[position]
        chosen = _single_type(demands(node.output[0]), types[node.output[0]])
        decided[position].inputs[0] = exactly(chosen)
        decided[position].outputs[0] = chosen
        result.available[node.output[0]] = {chosen: node.output[0]}

    for tensor in roots:
        stored = _stored_types(tensor, demands(tensor), index, decided, types)
        primary = types[tensor] if types[tensor] in stored else stored[0]
        result.available[tensor] = {}
        for elem_type in [primary] + [t for t in stored if t != primary]:
            name = tensor if elem_type == primary else names.claim(f"{tensor}/{short_name(elem_type)}")
            result.available[tensor][elem_type] = name
            if elem_type != types[tensor]:
                result.copies.append((tensor, elem_type, name))

    for value in graph.input:
        if types.get(value.name) not in RETYPABLE or value.name in result.available:
            continue
        authored = types[value.name]
        chosen = authored if keep_io_types else _single_type(demands(value.name), authored)
        result.available[value.name] = {chosen: value.name}
    return result


def _root_weights(graph, index: GraphIndex, precisions, types, result: WeightTypes) -> list[str]:
    """Float initializers that are not graph inputs, then float Constant values, in file order."""
    roots = [
        tensor.name
        for tensor in graph.initializer
        if tensor.name not in index.graph_inputs and types.get(tensor.name) in RETYPABLE
    ]
    for position, node in enumerate(graph.node):
        if (
            node.op_type == "Constant"
            and node.domain in DEFAULT_DOMAINS
            and precisions[position] != KEEP
            and len(node.attribute) == 1
            and node.attribute[0].name in FLOAT_CONSTANT_ATTRIBUTES
            and types.get(node.output[0]) in RETYPABLE
        ):
            roots.append(node.output[0])
            result.constant_nodes[node.output[0]] = position
    return roots


def _passthrough_chain(graph, precisions, types, weights: set[str]) -> list[int]:
    """Positions of data-movement nodes whose data input is a weight, in topological order."""
    chain = []
    for position, node in enumerate(graph.node):
        if (
            node.op_type in WEIGHT_PASSTHROUGH_OPS
            and node.domain in DEFAULT_DOMAINS
            and precisions[position] != KEEP
            and node.input
            and node.input[0] in weights
            and types.get(node.output[0]) in RETYPABLE
        ):
            chain.append(position)
            weights.add(node.output[0])
    return chain


def _exact_demands(tensor, index: GraphIndex, decided, types, keep_io_types, body_needs=None) -> list[int]:
    """The types consumers need `tensor` in exactly, in consumer order."""
    needed = []
    for position, slot in index.consumers.get(tensor, ()):
        requirement = decided[position].inputs[slot]
        if requirement is not None and requirement.is_exact:
            needed.append(requirement.cast_to)
    # Subgraphs read outer tensors by name: in the types their nodes need (body_demands.py),
    # else in what they were written against.
    if body_needs is not None and tensor in index.implicit:
        needed.extend(body_needs.get(tensor, ()))
    else:
        needed.extend(types[tensor] for _ in index.implicit.get(tensor, ()))
    if keep_io_types and tensor in index.graph_outputs:
        needed.append(types[tensor])
    return needed


def _single_type(demanded: list[int], authored: int) -> int:
    distinct = set(demanded)
    return demanded[0] if len(distinct) == 1 else authored


def _stored_types(tensor, demanded: list[int], index: GraphIndex, decided, types) -> list[int]:
    """Distinct demanded types in first-demand order, plus what flexible consumers cannot read."""
    stored = list(dict.fromkeys(demanded)) or [types[tensor]]
    for position, slot in index.consumers.get(tensor, ()):
        requirement = decided[position].inputs[slot]
        if requirement is not None and not any(t in requirement.accepted for t in stored):
            stored.append(requirement.cast_to)
    return stored
