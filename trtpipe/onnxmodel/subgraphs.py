"""Walking a graph and every subgraph nested in it (If/Loop/Scan bodies)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


SUBGRAPH_ATTRIBUTE_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def has_body(node: onnx.NodeProto) -> bool:
    """Whether `node` holds a graph in an attribute (If/Loop/Scan bodies, a custom op's graph)."""
    return any(attribute.type in SUBGRAPH_ATTRIBUTE_TYPES for attribute in node.attribute)


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every subgraph in its nodes' attributes, nested, outer graphs first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from all_graphs(attribute.g)
            for subgraph in attribute.graphs:
                yield from all_graphs(subgraph)
