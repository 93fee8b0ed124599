"""Recurrent nodes (LSTM, GRU, RNN) inside an If branch whose first output `Y` nobody reads.

A pure graph question, asked for the build stage's op check (trtpipe/trt/parser/builder_limits.py
says why TensorRT cares): walk the main graph and every subgraph; in a graph that is an If
branch, or lies anywhere under one, report each recurrent node whose output 0 is omitted
(`""`) or read by no node of that graph, of a graph nested in it (outer-scope reads), nor
by the graph's outputs. Nodes are named as the parser names them (`<If>/then_branch/<node>`,
trtpipe/graph/names/parser_support.py `located_nodes`).

Decisions:
- Only the default ONNX domain: a `com.microsoft` LSTM is another op (it is reported, or
  not, by the op list check).
- Model-local functions are not expanded here: their bodies are not If branches of this
  graph, and no measurement says how the builder treats them.
"""

from __future__ import annotations

import onnx

from trtpipe.graph.names.parser_names import parser_names
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS

RECURRENT = ("LSTM", "GRU", "RNN")


def _subgraphs(node: onnx.NodeProto):
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
        for graph in graphs:
            yield attribute.name, graph


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name the graph hands out (its outputs) or that a node of it, or of a
    graph nested in it, reads."""
    names = {output.name for output in graph.output}
    stack = [graph]
    while stack:
        current = stack.pop()
        for node in current.node:
            names.update(node.input)
            stack.extend(sub for _, sub in _subgraphs(node))
    return names


def recurrent_without_y_in_if(model: onnx.ModelProto, op_types: tuple[str, ...] = RECURRENT,
                              ) -> list[tuple[str, str]]:
    """(where, op type) of each recurrent node under an If branch whose `Y` output is unread."""
    found: list[tuple[str, str]] = []

    def walk(graph: onnx.GraphProto, prefix: str, under_if: bool):
        read = _read_names(graph) if under_if else set()
        for name, node in parser_names(graph.node).items():
            where = name if name.startswith(prefix) else f"{prefix}{name}"
            if under_if and node.domain in DEFAULT_DOMAINS and node.op_type in op_types:
                y = node.output[0] if node.output else ""
                if not y or y not in read:
                    found.append((where, node.op_type))
            for attribute, sub in _subgraphs(node):
                walk(sub, f"{where}/{attribute}/", under_if or node.op_type == "If")

    walk(model.graph, "", False)
    return found
