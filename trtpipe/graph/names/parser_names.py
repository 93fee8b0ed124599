"""Names as TensorRT's ONNX parser gives layers, and the one rule for making a name unique.

TensorRT names a layer after its ONNX node, or `node_of_<first output>` for an
unnamed node (onnx-tensorrt `getNodeName`). Rules, plans, promotion and engine
audits all address nodes by these names, so they are computed in one place.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

import onnx


def layer_name(node: onnx.NodeProto) -> str:
    return node.name or f"node_of_{node.output[0] if node.output else 'unnamed'}"


def unique_name(base: str, taken: Container[str]) -> str:
    """`base`, else `base_1`, `base_2`, ...: the first not in `taken` (the caller records it).

    ONNX does not require unique node names; a rule must address one node and
    TensorRT rejects duplicate layer names, so repeats get a deterministic suffix.
    """
    name, index = base, 0
    while name in taken:
        index += 1
        name = f"{base}_{index}"
    return name


def parser_names(nodes: Iterable[onnx.NodeProto]) -> dict[str, onnx.NodeProto]:
    """Unique layer name -> node, in node order."""
    named: dict[str, onnx.NodeProto] = {}
    for node in nodes:
        named[unique_name(layer_name(node), named)] = node
    return named
