"""Remove Casts that change nothing from the materialised model: dead Casts, Casts to the type
their input has, and exact round trips.

Three rewrites per graph: no-op Casts and round trips first, in graph order (a chain of them
collapses to its first input), then dead Casts until none is left (removing one can leave the
Cast feeding it unread):

1. dead: a Cast whose output no node reads (directly, or from inside an If/Loop/Scan
   body) and that is not an output of its graph. Authored or added alike: after
   planning, a reader that used to read an author's upcast may read the FP16 tensor
   itself (casts.py looks through lossless Casts), leaving the Cast computing a value
   nobody uses. TensorRT would drop it too, but the ONNX should say what runs.
2. exact round trip: `Cast(x: A -> B)` read by `Cast(-> A)`, where B holds every
   value of A exactly (`holds_exactly`): the second Cast returns `x` bit for bit, so
   its readers read `x` and it is removed. The first Cast stays while something else
   reads its output (then 1. removes it when nothing does).
3. no-op: `Cast(x: A -> A)`: its readers read `x`. The FP32 baseline makes them (an author's
   FP16 -> FP32 Cast whose input is now computed in FP32, plan/baseline.py); an author's own
   are removed here too, since they change no value either.

What this never does (so `precision.respect_authored` stays true: the author's FP32
islands stay FP32):
- bypass a round trip through a type that rounds (FP32 -> FP16 -> FP32 changes values;
  FP16 <-> BF16 loses bits both ways), or whose types it cannot read from the model;
- remove any node but a Cast, or a Cast whose output is a graph (or body) output:
  graph outputs keep their names and types;
- touch a Cast of another operator domain.

Decisions:
- The rewrites run in every graph, If/Loop/Scan bodies included, each within one
  scope: a tensor read from inside a body counts as read (1.), and a round trip whose
  second Cast's output is read from inside a body is left alone (2.), since bypassing
  it would mean renaming what the body reads. A round trip whose two Casts sit in
  different scopes is not looked for.
- Integers count only where every value survives: a wider integer range (INT8 ->
  INT32 -> INT8), BOOL through any number type (0/1), and integers through a float
  whose significand holds them all (INT8/UINT8 through FP16, up to 16-bit through FP32,
  up to 32-bit through FP64). Float -> integer never does (fractions). A same-width or
  wider integer of the other sign (INT8 through UINT8) does not count: ONNX leaves an
  out-of-range integer Cast undefined, although ONNX Runtime wraps it back.
- Called by the precision stage on the model it writes (after `materialize`); the
  search's trials skip it: it changes no value, so no trial's verdict.
- Every removal is returned with its reason; the precision stage records them in
  the plan (`redundant_casts`).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import onnx
from onnx import TensorProto

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import is_lossless, short_name
from trtpipe.precision.network.graph_index import outer_names_read_by_subgraphs
from trtpipe.numerics.tensor_types import collect_declared
from trtpipe.onnxmodel.subgraphs import has_body

# Significand bits (implicit bit included) of the float types an integer may pass through.
_SIGNIFICAND_BITS = {TensorProto.FLOAT16: 11, TensorProto.BFLOAT16: 8, TensorProto.FLOAT: 24, TensorProto.DOUBLE: 53}
_INTEGER_RANGES = {
    TensorProto.INT8: (-(2**7), 2**7 - 1), TensorProto.UINT8: (0, 2**8 - 1),
    TensorProto.INT16: (-(2**15), 2**15 - 1), TensorProto.UINT16: (0, 2**16 - 1),
    TensorProto.INT32: (-(2**31), 2**31 - 1), TensorProto.UINT32: (0, 2**32 - 1),
    TensorProto.INT64: (-(2**63), 2**63 - 1), TensorProto.UINT64: (0, 2**64 - 1),
}
DEAD = "dead: nothing reads its output and it is not a graph output"


def holds_exactly(source: int, middle: int) -> bool:
    """True when every value of `source` is exactly a value of `middle`, so `source -> middle
    -> source` returns every value unchanged."""
    if source == TensorProto.BOOL:
        return middle == TensorProto.BOOL or middle in _INTEGER_RANGES or middle in _SIGNIFICAND_BITS
    if source in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[source]
        if middle in _INTEGER_RANGES:
            wide_low, wide_high = _INTEGER_RANGES[middle]
            return wide_low <= low and high <= wide_high
        return middle in _SIGNIFICAND_BITS and max(-low, high) <= 2 ** _SIGNIFICAND_BITS[middle]
    return source in _SIGNIFICAND_BITS and middle in _SIGNIFICAND_BITS and is_lossless(source, middle)


def remove_redundant_casts(model: onnx.ModelProto) -> list[dict]:
    """Apply the rewrites to `model` in place, every graph included; returns one entry per removed
    Cast: {name, graph, reason} (`graph` is the name of the graph or body it was in)."""
    removed: list[dict] = []
    _simplify(model.graph, [], removed)
    return removed


class _Scope:
    """One graph of the walk and, read on first use, the element type of each tensor it records
    (input, output, value_info, initializer, a Cast's target). Read only when a Cast there first
    reads a Cast.

    Decision: the table lives on the scope object, which holds its graph, rather than in a cache
    keyed by `id(graph)`: a body's protobuf wrapper is freed after its walk and the next body's
    often gets the same id, which read another body's types (review: a tensor name reused across
    If branches was judged an exact round trip and the result failed ONNX Runtime)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self._types: dict[str, int] | None = None

    def types(self) -> dict[str, int]:
        if self._types is None:
            self._types = _element_types(self.graph)
        return self._types


def _element_type(name: str, scopes: list[_Scope]) -> int | None:
    """`name`'s element type as the innermost scope recording it says; None when none does."""
    for scope in reversed(scopes):
        table = scope.types()
        if name in table:
            return table[name]
    return None


def _simplify(graph: onnx.GraphProto, enclosing: list[_Scope], removed: list[dict]) -> None:
    """The rewrites on `graph`, then on its bodies; appends the removed Casts in graph order."""
    scopes = [*enclosing, _Scope(graph)]
    nodes = list(graph.node)
    with_bodies = [node for node in nodes if has_body(node)]
    cast_at = {node.output[0]: position for position, node in enumerate(nodes) if _is_cast(node)}
    if cast_at:
        outputs = {value.name for value in graph.output}
        body_reads = {name for node in with_bodies for name in outer_names_read_by_subgraphs(node)}
        reasons = _bypass_round_trips(nodes, cast_at, outputs | body_reads, lambda name: _element_type(name, scopes))
        reasons.update(_dead_casts(nodes, cast_at, outputs, body_reads, reasons))
        if reasons:
            _remove(graph, nodes, reasons)
            with_bodies = [node for node in graph.node if has_body(node)]  # the graph holds copies now
            removed += [{"name": nodes[p].name, "graph": graph.name, "reason": reasons[p]} for p in sorted(reasons)]
    for node in with_bodies:
        for attribute in node.attribute:
            for body in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs):
                _simplify(body, scopes, removed)


def _remove(graph: onnx.GraphProto, nodes: list, positions: dict[int, str]) -> None:
    """The graph without the nodes at `positions` (it stores copies of the `nodes` it keeps)."""
    gone = {nodes[position].output[0] for position in positions}
    del graph.node[:]
    graph.node.extend(node for position, node in enumerate(nodes) if position not in positions)
    kept_info = [info for info in graph.value_info if info.name not in gone]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)


def _bypass_round_trips(nodes: list, cast_at: dict[str, int], kept: set[str], element_type) -> dict[int, str]:
    """Readers of every exact round trip's second Cast read the first Cast's input instead, and readers
    of a no-op Cast its input; those Casts, now read by nothing, are returned (position -> reason). In the graph's (topological) order,
    so a chain of round trips collapses to its first input. `kept`: outputs no Cast may stop writing."""
    renamed: dict[str, str] = {}
    removed: dict[int, str] = {}
    for position in sorted(cast_at.values()):
        second = nodes[position]
        if second.output[0] in kept:
            continue
        arriving = renamed.get(second.input[0], second.input[0])
        if element_type(arriving) is not None and element_type(arriving) == _target(second):
            renamed[second.output[0]] = arriving
            removed[position] = (f"no-op: casts {arriving} to {short_name(_target(second))}, the type it "
                                 f"already has: its readers read {arriving} directly")
            continue
        first_position = cast_at.get(arriving)
        if first_position is None:
            continue
        first = nodes[first_position]
        original = renamed.get(first.input[0], first.input[0])
        source, middle = element_type(original), _target(first)
        if source is None or middle is None or _target(second) != source or not holds_exactly(source, middle):
            continue
        renamed[second.output[0]] = original
        removed[position] = (
            f"exact round trip: {first.name} casts {original} from {short_name(source)} to "
            f"{short_name(middle)}, which holds every {short_name(source)} value exactly, and this Cast "
            f"casts it back: its readers read {original} directly")
    if renamed:
        for node in nodes:
            for slot, name in enumerate(node.input):
                while name in renamed:  # a graph not in topological order: a reader before its round trip
                    name = renamed[name]
                if name != node.input[slot]:
                    node.input[slot] = name
    return removed


def _dead_casts(nodes: list, cast_at: dict[str, int], outputs: set[str], body_reads: set[str],
                removed: dict[int, str]) -> dict[int, str]:
    """Casts nothing reads (position -> reason), repeatedly: removing one may leave the Cast feeding
    it unread. `removed`: Casts already going, whose reads do not count."""
    readers = Counter(chain(outputs, body_reads, chain.from_iterable(
        node.input for position, node in enumerate(nodes) if position not in removed)))
    went = {nodes[position].input[0]: nodes[position].name for position in removed}
    dead: dict[int, str] = {}
    queue = [position for position in cast_at.values() if position not in removed]
    while queue:
        position = queue.pop()
        node = nodes[position]
        if position in dead or readers[node.output[0]]:
            continue
        bypassed = went.get(node.output[0])
        dead[position] = DEAD + (f" (once {bypassed} went)" if bypassed else "")
        readers[node.input[0]] -= 1
        if node.input[0] in cast_at and cast_at[node.input[0]] not in removed:
            queue.append(cast_at[node.input[0]])
    return dead



def _element_types(graph: onnx.GraphProto) -> dict[str, int]:
    types: dict[str, int] = {}
    collect_declared(graph, types)
    for node in graph.node:
        if _is_cast(node) and _target(node) is not None:
            types[node.output[0]] = _target(node)
    return types


def _is_cast(node: onnx.NodeProto) -> bool:
    return (node.op_type == "Cast" and node.domain in DEFAULT_DOMAINS and len(node.input) == 1
            and len(node.output) == 1 and bool(node.input[0]) and bool(node.output[0]))


def _target(cast: onnx.NodeProto) -> int | None:
    return next((attribute.i for attribute in cast.attribute if attribute.name == "to"), None)


def forget_removed_casts(report: dict, removed: list[dict]) -> None:
    """The materialiser's report without the Casts this pass removed: `casts_added`, and the
    author's Casts it lists as reused (`casts_reused`; their readers now read the Cast's input)."""
    names = {entry["name"] for entry in removed}
    kept = [cast for cast in report["casts_added"]["casts"] if cast["name"] not in names]
    report["casts_added"] = {"count": len(kept), "casts": kept}
    report["casts_reused"] = [entry for entry in report.get("casts_reused", []) if entry["cast"] not in names]


def record_removals(document: dict, removed: list[dict]) -> None:
    """`redundant_casts` in the plan: how many Casts went, which and why (`authored`: the model
    the stage read had it); a removed authored Cast's node entry says so instead of "kept", and
    it moves from its precision's count to `totals.nodes.removed`."""
    entries = {entry["name"]: entry for entry in document["nodes"]}
    casts = []
    for cast in removed:
        authored = cast["name"] in entries
        casts.append({**cast, "authored": authored})
        if authored:
            entry = entries[cast["name"]]
            entry["reason"] = f"Cast: removed ({cast['reason']})"
            # The totals count nodes of the written model: a removed Cast is no longer "kept as authored".
            counts = document["totals"]["nodes"]
            counts[entry["precision"]] -= 1
            counts["removed"] = counts.get("removed", 0) + 1
    document["redundant_casts"] = {"count": len(casts), "authored": sum(c["authored"] for c in casts),
                                   "casts": casts}
