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
- Without metadata (TensorRT 8.x engines, or a build below DETAILED verbosity) the
  engine layer's *name* is all there is, and real engine graphs (TensorRT Engine
  Explorer's published examples, tests/trt/data/inspector/) show fused layers named by
  their parts: `Conv_5 + Add_6 + Relu_7`, `PWN(PWN(Sigmoid_3), Mul_4)`,
  `w + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)`, and Myelin regions by their first and
  last member, `{ForeignNode[first...last]}`. The name is split on that syntax and each
  part must name a node exactly (or `<node>_<N>`); for a ForeignNode only its two named
  ends are known to be inside, so only they are mapped (the members between are not
  guessed). `Reformatting CopyNode for ... to X` layers are TensorRT's format
  conversions: they implement no node (X is the layer they feed).
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable

_METADATA_ENTRY = re.compile(r"\[ONNX Layer: (.*?)(?: \| [^\]]*)?\]")
_SUFFIX = re.compile(r"^(.*)_(\d+)$")
_REFORMAT = re.compile(r"^Reformatting CopyNode for (Input|Output) Tensor \d+ to ")
_FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$", re.DOTALL)


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
        return [name]  # a node whose own name looks fused is itself
    found: list[str] = []
    for part in name_parts(name):
        node = _node_named(part, nodes)
        if node is not None and node not in found:
            found.append(node)
    return found


def name_parts(name: str) -> list[str]:
    """The layer names a fused engine layer's name is made of (itself when not fused); [] for a reformat."""
    if _REFORMAT.match(name):
        return []
    foreign = _FOREIGN.match(name)
    if foreign:
        ends = foreign.group(1).split("...")
        return [part for end in (ends[0], ends[-1]) for part in name_parts(end)] if len(ends) == 2 \
            else name_parts(foreign.group(1))
    pieces = _split_top(name, " + ")
    if len(pieces) > 1:
        return [part for piece in pieces for part in name_parts(piece)]
    if name.startswith("PWN(") and name.endswith(")"):
        return [part for piece in _split_top(name[4:-1], ", ") for part in name_parts(piece)]
    return [name]


def _node_named(part: str, nodes: Container[str]) -> str | None:
    if part in nodes:
        return part
    suffixed = _SUFFIX.match(part)
    if suffixed and suffixed.group(1) in nodes:
        return suffixed.group(1)
    return None


def _split_top(text: str, separator: str) -> list[str]:
    """`text` split on `separator` outside brackets."""
    pieces, depth, start, index = [], 0, 0, 0
    while index < len(text):
        char = text[index]
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0 and text.startswith(separator, index):
            pieces.append(text[start:index])
            index += len(separator)
            start = index
            continue
        index += 1
    pieces.append(text[start:])
    return pieces


def layers_by_node(layers: Iterable[tuple[str, str | None]], nodes: Container[str]) -> dict[str, list[str]]:
    """ONNX node -> names of the layers (in order) that carry it."""
    carried: dict[str, list[str]] = {}
    for name, metadata in layers:
        for node in nodes_of_layer(name, metadata, nodes):
            carried.setdefault(node, []).append(name)
    return carried
