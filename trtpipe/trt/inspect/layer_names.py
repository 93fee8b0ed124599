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
- Parts that are not layers of a node also appear in fused names: constants named after
  their initializer (`features.0.0.weight`, TF's `.../ReadVariableOp:0`) and layers
  TensorRT created unnamed (`(Unnamed Layer* 12) [Shuffle]`).

Decisions:
- A part maps to a node by its exact name; by the `<node>_<N>` rule only when that is
  unambiguous: the part is no tensor or initializer name of the model (exporters that
  name nodes after their outputs make `<tensor>_<N>` look like `<node>_<N>`) and no other
  node is named `<node>_<digits>` (then `<node>_<N>` may just as well be a node the model
  no longer has). An `(Unnamed Layer* N)` part is never mapped, whatever the model's names.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Container, Iterable, Mapping

_METADATA_ENTRY = re.compile(r"\[ONNX Layer: (.*?)(?: \| [^\]]*)?\]")
_SUFFIX = re.compile(r"^(.*)_(\d+)$")
_REFORMAT = re.compile(r"^Reformatting CopyNode for (Input|Output) Tensor \d+ to ")
_FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$", re.DOTALL)
_UNNAMED = re.compile(r"^\(Unnamed Layer\* \d+\)")


def onnx_nodes_in_metadata(metadata: str | None) -> list[str]:
    """The ONNX node names a layer's metadata lists, in order, without repeats."""
    if not metadata:
        return []
    names: list[str] = []
    for name in _METADATA_ENTRY.findall(metadata):
        if name not in names:
            names.append(name)
    return names


def nodes_of_layer(name: str, metadata: str | None, nodes: Collection[str],
                   tensors: Container[str] | None = None) -> list[str]:
    """The ONNX nodes a layer implements: from its metadata, else from its name
    (`<node>` or `<node>_<N>`); [] for a helper layer that names no node.

    `tensors`: the model's tensor and initializer names; by default those the nodes read and
    write when `nodes` maps names to ONNX nodes, else none known. For many layers, use layer_mapper."""
    return layer_mapper(nodes, tensors)(name, metadata)


def layer_mapper(nodes: Collection[str], tensors: Container[str] | None = None):
    """nodes_of_layer for one model, its name tables built once: (name, metadata) -> nodes."""
    tensors = model_tensors(nodes) if tensors is None else tensors
    self_suffixed = {m.group(1) for m in map(_SUFFIX.match, nodes) if m}  # bases of nodes named <base>_<N>

    def node_named(part: str) -> str | None:
        if _UNNAMED.match(part):
            return None  # a layer TensorRT made without a name implements no node we can name
        if part in nodes:
            return part
        suffixed = _SUFFIX.match(part)
        if not suffixed or suffixed.group(1) not in nodes or part in tensors:
            return None
        # The model itself names nodes <base>_<digits>: <base>_<N> may be one it no longer has.
        return None if suffixed.group(1) in self_suffixed else suffixed.group(1)

    def mapped(name: str, metadata: str | None) -> list[str]:
        listed = onnx_nodes_in_metadata(metadata)
        if listed:
            return listed
        if name in nodes and not _UNNAMED.match(name):
            return [name]  # a node whose own name looks fused is itself
        found: list[str] = []
        for part in name_parts(name):
            node = node_named(part)
            if node is not None and node not in found:
                found.append(node)
        return found

    return mapped


def model_tensors(nodes: Collection[str]) -> set[str]:
    """The tensor names (initializers included) the nodes of a name -> NodeProto mapping read and write."""
    if not isinstance(nodes, Mapping):
        return set()
    return {t for node in nodes.values() for t in (*getattr(node, "input", ()), *getattr(node, "output", ())) if t}


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


def layers_by_node(layers: Iterable[tuple[str, str | None]], nodes: Collection[str],
                   tensors: Container[str] | None = None) -> dict[str, list[str]]:
    """ONNX node -> names of the layers (in order) that carry it."""
    mapped = layer_mapper(nodes, tensors)
    carried: dict[str, list[str]] = {}
    for name, metadata in layers:
        for node in mapped(name, metadata):
            carried.setdefault(node, []).append(name)
    return carried
