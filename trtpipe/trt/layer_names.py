"""Which ONNX node(s) a TensorRT layer comes from: its metadata first, then its name.

Facts (verified in onnx-tensorrt and TensorRT sources, cited where used):
- The ONNX parser names a node's first layer after the node and further layers
  `<node>_<N>` (`generateUniqueName`: `basename + "_" + std::to_string(suffixCounter)`,
  one counter for the whole network, so N is not per node) — onnx/onnx-tensorrt
  weightUtils.cpp and ImporterContext::registerLayer.
- Every layer registered for a node carries the metadata
  `[ONNX Layer: <node name>]`, optionally followed by ` | <name> (<function>)` entries
  for local functions (`processMetadata`, onnx/onnx-tensorrt importerUtils.cpp).
  Helper layers the parser adds on its own (`ONNXTRT_*`) have no node.
- An engine layer that fused several network layers (a Myelin `ForeignNode`, a
  pointwise fusion) lists each one's metadata, joined by the ASCII separators
  \\x1E or \\x1F (TensorRT trex `fix_unicode`, tools/experimental/trt-engine-explorer
  trex/parser.py). We therefore find every `[ONNX Layer: ...]` entry, whatever
  separates them.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable

_METADATA_ENTRY = re.compile(r"\[ONNX Layer: (.*?)(?: \| [^\]]*)?\]")
_SUFFIX = re.compile(r"^(.*)_(\d+)$")


def onnx_nodes_in_metadata(metadata: str | None) -> list[str]:
    """The ONNX node names a layer's metadata lists, in order, without repeats."""
    if not metadata:
        return []
    names: list[str] = []
    for name in _METADATA_ENTRY.findall(metadata):
        if name not in names:
            names.append(name)
    return names


def nodes_of_layer(name: str, metadata: str | None, nodes: Container[str]) -> list[str]:
    """The ONNX nodes a layer implements: from its metadata, else from its name
    (`<node>` or `<node>_<N>`); [] for a helper layer that names no node."""
    listed = onnx_nodes_in_metadata(metadata)
    if listed:
        return listed
    if name in nodes:
        return [name]
    suffixed = _SUFFIX.match(name)
    if suffixed and suffixed.group(1) in nodes:
        return [suffixed.group(1)]
    return []


def layers_by_node(layers: Iterable[tuple[str, str | None]], nodes: Container[str]) -> dict[str, list[str]]:
    """ONNX node -> names of the layers (in order) that carry it."""
    carried: dict[str, list[str]] = {}
    for name, metadata in layers:
        for node in nodes_of_layer(name, metadata, nodes):
            carried.setdefault(node, []).append(name)
    return carried
