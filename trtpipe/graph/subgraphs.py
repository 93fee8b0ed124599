"""Walking a graph and every subgraph nested in it (If/Loop/Scan bodies)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every subgraph in its nodes' attributes, nested, outer graphs first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from all_graphs(attribute.g)
            for subgraph in attribute.graphs:
                yield from all_graphs(subgraph)
