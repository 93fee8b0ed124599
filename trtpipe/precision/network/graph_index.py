"""Who produces and who consumes each tensor of one graph (the main graph or a body), built once
per graph and materialisation.

Decisions:
- Every lookup the materialiser makes goes through these dictionaries, built in
  one pass over the nodes, so the whole pass stays linear in the graph size
  (no per-node scan of all nodes).
- Subgraphs (If/Loop/Scan bodies) may read main-graph tensors by name without
  listing them as node inputs. Those reads are indexed as `implicit` consumers,
  so a tensor they read is never silently retyped under them.
- Unnamed nodes are named exactly as TensorRT's ONNX parser names their layers
  (`getNodeName` in onnx-tensorrt: `"node_of_" + output(0)`), because precision
  rules are written against those layer names.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from trtpipe.graph.names.parser_names import layer_name, unique_name

def name_unnamed_nodes(model: onnx.ModelProto) -> list[str]:
    """Name every unnamed main-graph node `node_of_<first output>`, in place; returns the new names.

    Same rule as TensorRT's parser, so names never collide in a way TensorRT's
    would not: node outputs are unique, hence so are the generated names. A
    node with neither name nor outputs stays unnamed, as it does in TensorRT.
    """
    named = []
    for node in model.graph.node:
        if not node.name and node.output and node.output[0]:
            node.name = layer_name(node)
            named.append(node.name)
    return named


@dataclass
class GraphIndex:
    """Producer and consumers of every tensor name; positions refer to `graph.node`."""

    producer: dict[str, tuple[int, int]] = field(default_factory=dict)  # tensor -> (node, output)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    implicit: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    graph_inputs: dict[str, int] = field(default_factory=dict)  # name -> position
    graph_outputs: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    initializers: dict[str, int] = field(default_factory=dict)  # name -> position
    names_in_use: set[str] = field(default_factory=set)  # tensor and node names


def index_graph(graph: onnx.GraphProto) -> GraphIndex:
    index = GraphIndex()
    for position, value in enumerate(graph.input):
        index.graph_inputs[value.name] = position
    for position, value in enumerate(graph.output):
        index.graph_outputs[value.name].append(position)
    for position, tensor in enumerate(graph.initializer):
        index.initializers[tensor.name] = position
    index.names_in_use.update(index.graph_inputs, index.graph_outputs, index.initializers)
    for position, node in enumerate(graph.node):
        index.names_in_use.add(node.name)
        for slot, name in enumerate(node.input):
            if name:
                index.consumers[name].append((position, slot))
        for slot, name in enumerate(node.output):
            if name:
                index.producer[name] = (position, slot)
                index.names_in_use.add(name)
        for name in outer_names_read_by_subgraphs(node):
            index.implicit[name].append(position)
    return index


def outer_names_read_by_subgraphs(node: onnx.NodeProto) -> list[str]:
    """Names the node's subgraphs read from enclosing scopes, in first-use order."""
    if not node.attribute:
        return []  # no attribute, no body: most nodes, asked for every node of every graph index
    found: dict[str, None] = {}
    for graph in _subgraphs(node):
        _collect_outer_names(graph, set(), found)
    return list(found)


def outer_names_read(graph: onnx.GraphProto) -> list[str]:
    """Names `graph` (a body) and its nested bodies read from enclosing scopes, in first-use order."""
    found: dict[str, None] = {}
    _collect_outer_names(graph, set(), found)
    return list(found)


def _subgraphs(node: onnx.NodeProto):
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def _collect_outer_names(graph: onnx.GraphProto, enclosing_local: set[str], found: dict) -> None:
    local = set(enclosing_local)
    local.update(value.name for value in graph.input)
    local.update(tensor.name for tensor in graph.initializer)
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                found.setdefault(name)
        for subgraph in _subgraphs(node):
            _collect_outer_names(subgraph, local, found)
        local.update(node.output)
    for value in graph.output:
        if value.name not in local:
            found.setdefault(value.name)


def rename_outer_reads(node: onnx.NodeProto, old: str, new: str) -> None:
    """Make the node's subgraphs read `new` wherever they read the outer tensor `old`."""
    for graph in _subgraphs(node):
        _rename_in_graph(graph, old, new)


def _rename_in_graph(graph: onnx.GraphProto, old: str, new: str) -> None:
    if any(value.name == old for value in graph.input) or any(t.name == old for t in graph.initializer):
        return  # shadowed: this scope has its own `old`
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if name == old:
                node.input[slot] = new
        for subgraph in _subgraphs(node):
            _rename_in_graph(subgraph, old, new)
        if old in node.output:
            return  # shadowed from here on
    for value in graph.output:
        if value.name == old:
            value.name = new


class UniqueNames:
    """Hands out names not yet used by any tensor or node, deterministically (`_1`, `_2`...)."""

    def __init__(self, in_use: set[str]) -> None:
        self._in_use = set(in_use)

    def claim(self, base: str) -> str:
        name = unique_name(base, self._in_use)
        self._in_use.add(name)
        return name


def topologically_sorted(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` in an order where every input is produced first; stable, so a sorted list is unchanged.

    Kahn's algorithm, taking the lowest original position among the ready
    nodes, so the result is deterministic and keeps the authored order
    wherever it is already valid. Names no node produces (graph inputs,
    initializers) are available from the start.
    """
    producer_of = {name: position for position, node in enumerate(nodes) for name in node.output if name}
    waiting_on = [0] * len(nodes)
    dependents = defaultdict(list)
    for position, node in enumerate(nodes):
        needed = {producer_of[name] for name in _all_reads(node) if name in producer_of}
        needed.discard(position)
        waiting_on[position] = len(needed)
        for producer in needed:
            dependents[producer].append(position)
    ready = [position for position, count in enumerate(waiting_on) if count == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        position = heapq.heappop(ready)
        ordered.append(nodes[position])
        for dependent in dependents[position]:
            waiting_on[dependent] -= 1
            if waiting_on[dependent] == 0:
                heapq.heappush(ready, dependent)
    if len(ordered) != len(nodes):
        raise ValueError("the graph has a cycle; it cannot be ordered")
    return ordered


def _all_reads(node: onnx.NodeProto) -> list[str]:
    return [name for name in node.input if name] + outer_names_read_by_subgraphs(node)


def is_topologically_sorted(nodes: list[onnx.NodeProto]) -> bool:
    """True when every name some node produces is read only after that node."""
    produced = {name for node in nodes for name in node.output if name}
    seen = set()
    for node in nodes:
        if any(name in produced and name not in seen for name in _all_reads(node)):
            return False
        seen.update(node.output)
    return True
