"""The growth rule of constant folding: a node is folded only when its outputs are not much larger than its inputs.

Folding evaluates every node whose inputs are all constant and stores its
outputs as initializers. For most nodes that shrinks or keeps the model (shape
arithmetic, a Transpose or a Cast of a weight), but a node that expands data
(`Expand`, `Tile`, `ConstantOfShape`, `Range`, broadcasting arithmetic of
constants) can write far more than it reads: onnx's `light_resnet50` test model
(80 KB, every weight a `ConstantOfShape`) folded into 102 MB. TensorRT
evaluates such nodes at build time anyway, so leaving them in the graph costs
nothing there.

The rule (`GrowthRule.reason`): a foldable node is left unfolded when its
outputs hold more than `factor` x max(the bytes of the constants it derives
from, `floor_bytes`). The constants it derives from (its sources): the
initializers, Constant nodes and folded shapes its inputs come from, through
the foldable nodes before it, in this pass and the ones before (`Unfolded`).
Sizes are the static ones the graph records (value_info after shape
inference; constants' own shapes): a node whose output size is
unknown is left for a later pass (Polygraphy's loop infers shapes between
passes, by which time its inputs are initializers and its size known). What
shape inference still cannot size after every pass (inference off, or failing
on the model) folds in one last pass when its sources are within the floor: a
shape computation (Unsqueeze, Concat of dims) is folded as before, a tensor
expanded from more than the floor is not.

Decisions (each with its reason):
- Bytes of the sources, not of the node's own inputs: with its own inputs, a
  chain of Tiles, each doubling, or a Concat of a tensor with a function of
  itself, repeated, would fold into any size, each step within the factor.
  The sources of each tensor are kept from one pass to the next (a tensor
  folded in pass 1 is an initializer in pass 2 but keeps its sources). The
  same walk runs in onnx-graphsurgeon's pass (`should_exclude_node`) and in
  fast_fold.py's, on the same sizes: the same decisions, the same bytes.
- Defaults `factor=2`, `floor_bytes=4 KiB`: a widening Cast of a weight
  (float16 -> float32) still folds, and so does every shape computation (a
  shape is tens of bytes); an expansion does not. With these, `light_resnet50`
  gives 473 KB (tests/graph/test_no_inflation.py states the bound).
- The rule judges each foldable node, not only the tensors folding writes: a
  ConstantOfShape whose only reader is a ReduceMean of constants stays, with
  the ReduceMean, though folding both would write a few bytes. Knowing what is
  written needs the consumers' decisions first (a fixpoint over the graph),
  which onnx-graphsurgeon's per-node `should_exclude_node` cannot express.
  TensorRT evaluates both at build time.
- Not bounded: a constant read by many foldable nodes is copied into each
  result (each within the rule); the bound holds per folded tensor.
- A node left unfolded also keeps its consumers unfolded (they read a tensor
  that is no longer constant): onnx-graphsurgeon's rule, reproduced in fast_fold.
- If/Loop bodies are folded by onnx-graphsurgeon without `should_exclude_node`
  (0.6.1 does not pass it on): the rule applies to the main graph and functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

# Bytes per element by ONNX element type (onnx-graphsurgeon's get_itemsize, for the types it sizes).
ITEMSIZE = {TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
            TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
            TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8,
            TensorProto.BFLOAT16: 2, TensorProto.FLOAT8E4M3FN: 1, TensorProto.FLOAT8E4M3FNUZ: 1,
            TensorProto.FLOAT8E5M2: 1, TensorProto.FLOAT8E5M2FNUZ: 1}

DEFAULT_FACTOR = 2.0
DEFAULT_FLOOR_BYTES = 4 << 10
UNKNOWN_OUTPUT = "output size unknown"


@dataclass(frozen=True)
class GrowthRule:
    factor: float = DEFAULT_FACTOR
    floor_bytes: int = DEFAULT_FLOOR_BYTES
    # sanitize's last pass (sanitize.py): an output shape inference could not size folds when its sources
    # are within the floor (a shape computation), as onnx-graphsurgeon would fold it.
    unknown_folds: bool = False

    def bound(self, input_bytes: int) -> float:
        return self.factor * max(input_bytes, self.floor_bytes)

    def reason(self, input_bytes: list[int | None], output_bytes: list[int | None]) -> str | None:
        """Why a node with these input and output sizes stays unfolded; None: it may fold."""
        if any(size is None for size in input_bytes):
            return "input size unknown"
        if any(size is None for size in output_bytes):
            return None if self.unknown_folds and sum(input_bytes) <= self.floor_bytes else UNKNOWN_OUTPUT
        produced, read = sum(output_bytes), sum(input_bytes)
        if produced > self.bound(read):
            return f"would write {produced} bytes from {read} (bound {self.factor:g} x max(inputs, {self.floor_bytes}))"
        return None


def tensor_bytes(elem_type, shape) -> int | None:
    """Bytes of a tensor of ONNX element type `elem_type` and `shape` (ints); None when not static or not sized."""
    itemsize = ITEMSIZE.get(elem_type)
    if itemsize is None or shape is None or any(not isinstance(dim, (int, np.integer)) or dim < 0 for dim in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) * itemsize


class Unfolded:
    """One sanitize folding's growth state, shared by its passes (fast or graphsurgeon's).

    `entries`: what the rule left unfolded, keyed by the node's first output (nodes may be unnamed).
    `sources`: tensor name -> the constants it derives from, for each tensor a pass found foldable; a
    tensor folded by an earlier pass (an initializer now) keeps its sources, so a chain of expansions
    cannot grow by `factor` once per pass. `source_bytes`: the bytes of each such constant.
    """

    def __init__(self):
        self.entries: dict[str, dict] = {}
        self.sources: dict[str, frozenset] = {}
        self.source_bytes: dict[str, int | None] = {}
        # First outputs of nodes excluded on known sizes: every later pass decides the same (same sources, same
        # sizes), so fold_check.may_fold need not run the passes for them.
        self.settled: set[str] = set()

    def add(self, node_name: str, op_type: str, outputs: list[str], read, output_bytes, reason: str) -> None:
        self.entries[outputs[0]] = {"node": node_name, "op_type": op_type, "output": outputs[0],
                                    "input_bytes": read, "output_bytes": _total(output_bytes), "reason": reason}

    def constant_sources(self, name: str, size) -> frozenset:
        """The sources of constant `name` (`size()` gives its bytes when it is a source itself)."""
        known = self.sources.get(name)
        if known is not None:
            return known
        if name not in self.source_bytes:
            self.source_bytes[name] = size()
        return frozenset((name,))

    def decide(self, rule: GrowthRule, node_name: str, op_type: str, outputs: list[str], sources: frozenset,
               output_bytes: list[int | None]) -> bool:
        """Whether the node is excluded; records its outputs' sources when it is not, or the entry when it is."""
        sizes = [self.source_bytes[name] for name in sorted(sources)]
        reason = rule.reason(sizes, output_bytes)
        if outputs:
            self.settled.discard(outputs[0])
        if reason is not None:
            self.add(node_name, op_type, outputs, _total(sizes), output_bytes, reason)
            if outputs and None not in sizes and None not in output_bytes:
                self.settled.add(outputs[0])
            return True
        for name in outputs:
            self.sources[name] = sources
        return False

    def copy(self) -> "Unfolded":
        other = Unfolded()
        other.entries, other.sources, other.source_bytes = dict(self.entries), dict(self.sources), dict(self.source_bytes)
        other.settled = set(self.settled)
        return other

    def update(self, other: "Unfolded") -> None:
        self.entries, self.sources, self.source_bytes = other.entries, other.sources, other.source_bytes
        self.settled = other.settled

    def remaining(self, model) -> list[dict]:
        """The entries whose node is still in `model`'s main graph (a later pass may have folded it)."""
        produced = {node.output[0] for node in model.graph.node if node.output}
        return [entry for name, entry in sorted(self.entries.items()) if name in produced]


def _total(sizes) -> int | None:
    return None if any(size is None for size in sizes) else int(sum(sizes))


def gs_excluder(rule: GrowthRule, unfolded: Unfolded):
    """onnx-graphsurgeon's `should_exclude_node` for `rule`, recording into `unfolded`."""
    from onnx_graphsurgeon import Constant
    from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx

    def size(tensor) -> int | None:
        dtype = tensor.dtype
        if dtype is None:
            return None
        try:
            elem_type = dtype if isinstance(dtype, int) else dtype_to_onnx(dtype)
        except Exception:  # noqa: BLE001 - a type graphsurgeon cannot name: unknown size
            return None
        return tensor_bytes(elem_type, list(tensor.shape) if tensor.shape is not None else None)

    def sources_of(tensor) -> frozenset:
        if isinstance(tensor, Constant):
            return unfolded.constant_sources(tensor.name, lambda: size(tensor))
        known = unfolded.sources.get(tensor.name)
        if known is not None:  # a foldable output of this pass: decided already (the graph is sorted)
            return known
        if not tensor.inputs:  # not expected (a foldable tensor has a producer): a source of unknown size
            return unfolded.constant_sources(tensor.name, lambda: None)
        return frozenset().union(*(sources_of(t) for t in tensor.inputs[0].inputs if not t.is_empty()))

    def exclude(node) -> bool:
        sources = frozenset().union(*(sources_of(t) for t in node.inputs if not t.is_empty()))
        return unfolded.decide(rule, node.name, node.op, [t.name for t in node.outputs], sources,
                               [size(t) for t in node.outputs])

    return exclude
