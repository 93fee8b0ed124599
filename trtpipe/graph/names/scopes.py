"""Where a node lives: one name for every node, main graph and If/Loop/Scan bodies alike.

Decisions:
- A body node is named `<control-flow node>/<attribute>/<node>`, e.g.
  `vad/then_branch/lstm` or `rnn/body/in_proj`, nested bodies nesting the
  prefix. TensorRT's ONNX parser names a layer inside a body exactly as in the
  main graph (onnx-tensorrt `getNodeName`: the node's name, or
  `node_of_<first output>`), with no notion of scope: a bare body name says
  nothing about where it lives, and an If's two branches often reuse names.
  `name_nodes_as_parser_does` writes the qualified name into the model, so the
  layer TensorRT builds from the node carries it and the plan, the rules and
  the engine use one set of names. A node already named with its prefix keeps
  its name, so naming twice changes nothing.
- Main-graph names are exactly what they were before bodies were indexed
  (`unique_name` over the main graph, in node order); body names are made
  unique against every name given before them.
- Order: a body's nodes come right before their control-flow node (its body
  runs before its outputs exist, and after everything its inputs and the
  body's outer-scope reads need), so a topological main graph gives a
  topological list.
- Tensor names: ONNX's static single assignment (enforced by the full checker)
  makes a name unique along each chain of enclosing scopes; only sibling scopes
  (the two branches of an If, two bodies) may reuse a local name.
  `rename_sibling_collisions` renames such locals (`<name>_1`) so that every
  tensor name of the model means one tensor; body inputs and outputs are bound
  by position, so renaming them changes nothing outside the body.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import onnx

from trtpipe.graph.names.parser_names import layer_name, unique_name

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
REPEATING_OPS = frozenset({"Loop", "Scan"})


@dataclass(frozen=True)
class ScopedNode:
    name: str  # unique, qualified
    node: onnx.NodeProto
    graph: onnx.GraphProto  # the graph whose `node` list holds it
    parent: str | None  # the control-flow node whose body holds it; None in the main graph
    repeat_depth: int  # how many Loop/Scan bodies enclose it


def node_subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, graph) of every body of `node`."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.name, attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            for position, graph in enumerate(attribute.graphs):
                yield f"{attribute.name}{position}", graph


def scoped_nodes(graph: onnx.GraphProto) -> list[ScopedNode]:
    """Every node of `graph` and its bodies, named and ordered as the module docstring says."""
    taken: dict[str, None] = {}
    main_names = []
    for node in graph.node:
        name = unique_name(layer_name(node), taken)
        taken[name] = None
        main_names.append(name)
    found: list[ScopedNode] = []
    for node, name in zip(graph.node, main_names):
        _add_bodies(node, name, 0, taken, found)
        found.append(ScopedNode(name, node, graph, None, 0))
    return found


def _add_bodies(node, name, depth, taken, found) -> None:
    inner_depth = depth + (node.op_type in REPEATING_OPS)
    for attribute, body in node_subgraphs(node):
        prefix = f"{name}/{attribute}/"
        for inner in body.node:
            base = inner.name if inner.name.startswith(prefix) else prefix + layer_name(inner)
            inner_name = unique_name(base, taken)
            taken[inner_name] = None
            _add_bodies(inner, inner_name, inner_depth, taken, found)
            found.append(ScopedNode(inner_name, inner, body, name, inner_depth))


def name_all_nodes(model: onnx.ModelProto) -> int:
    """Write every node's qualified name into `model`; returns how many changed."""
    changed = 0
    for scoped in scoped_nodes(model.graph):
        if scoped.node.name != scoped.name:
            scoped.node.name = scoped.name
            changed += 1
    return changed


def rename_sibling_collisions(graph: onnx.GraphProto) -> list[tuple[str, str]]:
    """Rename body-local tensors whose name another scope defines too; returns (old, new) pairs."""
    seen = _local_definitions(graph)
    # A new name must be free in every scope, also in those not visited yet: `x` renamed to `x_1`
    # while a later branch defines its own `x_1` would make a new collision (ONNX Runtime refuses
    # a model whose initializer names repeat across scopes).
    taken = set(seen)
    for node in graph.node:
        _collect_definitions(node, taken)
    renamed: list[tuple[str, str]] = []
    for node in graph.node:
        _rename_in_bodies(node, seen, taken, renamed)
    return renamed


def _collect_definitions(node, taken: set[str]) -> None:
    for _, body in node_subgraphs(node):
        taken.update(_local_definitions(body))
        for inner in body.node:
            _collect_definitions(inner, taken)


def _local_definitions(graph: onnx.GraphProto) -> set[str]:
    names = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    names.update(name for node in graph.node for name in node.output if name)
    return names


def _rename_in_bodies(node, seen: set[str], taken: set[str], renamed: list) -> None:
    for _, body in node_subgraphs(node):
        for old in sorted(_local_definitions(body)):
            if old in seen:
                new = unique_name(old, taken)
                _rename_everywhere(body, old, new)
                renamed.append((old, new))
                seen.add(new)
                taken.add(new)
            else:
                seen.add(old)
        for inner in body.node:
            _rename_in_bodies(inner, seen, taken, renamed)


def _rename_everywhere(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every use and definition of `old` in `graph` and in the bodies that do not redefine it."""
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name == old:
            value.name = new
    for tensor in graph.initializer:
        if tensor.name == old:
            tensor.name = new
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if name == old:
                node.input[slot] = new
        for slot, name in enumerate(node.output):
            if name == old:
                node.output[slot] = new
        for _, body in node_subgraphs(node):
            if old not in _local_definitions(body):
                _rename_everywhere(body, old, new)
