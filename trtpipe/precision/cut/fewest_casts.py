"""Fewest Casts for a given FP32 set: which cheap neighbours join the FP32 islands.

The nodes that must be FP32 (evidence, rules, authored types) and the heavy
nodes (MatMul, Conv, ...: their FLOPs are what FP16 is for) are fixed. Every
other node whose precision came from the default may join FP32 when that
removes Casts: an FP32 node between two Reshapes costs 2 Casts when the
Reshapes join it, 4 when they stay FP16 on both sides.

The materialiser (casts.py) writes at most one Cast per (tensor, type): a
tensor produced in one type costs one Cast when any consumer (or a graph output
kept in its type, `keep_io_types`) needs the other. That cost is exact as a
minimum s-t cut, so the plan minimises it exactly, then the number of nodes
moved to FP32 (cheap nodes have no FLOPs in the plan's FLOP share: flops.py):

- label 0 (source side) is low precision, label 1 (sink side) FP32;
- per tensor, `y` ("an FP32 copy exists"): cut [producer=0, y=1] costs one Cast,
  and a consumer labelled 1 forces y=1 (an infinite edge y -> consumer);
- per tensor, `z` ("a low-precision copy exists", as z=0): cut [z=0, producer=1]
  costs one Cast, and a consumer labelled 0 forces z=0;
- fewest nodes moved among the cuts with fewest Casts: the smallest sink side of a
  minimum cut (min_cut.py), with no per-node edge at all.

Decision: the tie-break is the lattice of minimum cuts, not a weighted edge. The
minimum cuts of one graph are closed under union and intersection, so there is one
with the fewest vertices on the sink side, contained in every other one's: its FP32
set is contained in every fewest-Casts plan's, so it moves the fewest nodes, and it
is the only plan that does (a plan with as many moved nodes contains it, so equals
it). A weighted tie-break (one Cast worth more than all movable nodes, one unit per
moved node: the same plan) gave every movable node an edge from the source: on a
chain of n cheap nodes Dinic's algorithm then needed ~n/2 phases of O(n) each, 307 s
at 10,000 nodes. Without those edges a chain carries no flow at all.

Decisions:
- Only FP16 -> FP32, never back: FP32 was chosen for a reason, and moving a
  node to FP32 changes no stored tensor's range (auto_boundaries.py checked
  every tensor the plan stores in FP16; a node moved here produced its output in
  FP16 before, so a Cast of it to FP16 holds a checked value).
- Main graph only: If/Loop/Scan bodies and their nodes keep their plan (the
  materialiser serves bodies from their own scope), and so do the producers of
  tensors bodies read from the outer scope (`Network.tensors_read_in_bodies`).
- Consumers that read any type (Cast, shape ops, nodes without float output) and
  constants (weights are stored in the type their readers need, no Cast) cost nothing.
"""

from __future__ import annotations

import logging

import onnx

from trtpipe.precision.cut.min_cut import INFINITE, SINK, SOURCE, CutGraph
from trtpipe.precision.cut.smoothing import HEAVY_OPS
from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.network.flops import HEAVY_OPS as FLOP_OPS
from trtpipe.precision.network.network import Network

log = logging.getLogger(__name__)

FIXED_OPS = frozenset(HEAVY_OPS) | frozenset(FLOP_OPS)
LOW, FP32 = 0, 1
_LABEL_OF_TYPE = {onnx.TensorProto.FLOAT: FP32, onnx.TensorProto.FLOAT16: LOW, onnx.TensorProto.BFLOAT16: LOW}


def fewest_casts(net: Network, decisions: dict[str, Decision], keep_io_types: bool) -> dict:
    """Move (in place) the cheap default nodes whose FP32 removes Casts; returns the plan's record."""
    # Decision: producers of tensors read in If/Loop/Scan bodies stay as planned; the materialiser gives
    # each body its own Cast of such a read, which this cost model does not count (moving the producer
    # could add a Cast per body: 7 -> 9 with three Ifs, found in review).
    read_in_bodies = net.tensors_read_in_bodies()
    movable = [n for n in net.names if _movable(net, decisions, n)
               and not any(t in read_in_bodies for t in net.nodes[n].output)]
    # Decision: an insertion-ordered set (network order), not a set: iterating a set of names follows
    # the process's string hashing, which reordered the plan's `moved` list from one run to the next.
    problem = _CutProblem(net, decisions, dict.fromkeys(movable), keep_io_types)
    before = problem.casts({})
    moved = problem.solve()
    after = problem.casts({n: FP32 for n in moved})
    if after >= before:  # nothing to gain: keep the plan as it is
        return {"casts_before": before, "casts_after": before, "moved": []}
    for name in moved:
        decisions[name] = Decision(
            "fp32", f"fewest Casts: joins its FP32 neighbours (the plan's Casts {before} -> {after})", "auto",
            decisions[name].observed_max_abs)
    log.info("fewest Casts: %d cheap node(s) join FP32 islands, Casts %d -> %d", len(moved), before, after)
    return {"casts_before": before, "casts_after": after, "moved": moved}


def _movable(net: Network, decisions: dict[str, Decision], name: str) -> bool:
    decision = decisions[name]
    return (decision.source == "default" and decision.precision in LOW_PRECISIONS and name not in net.parent
            and not net.is_control_flow(name) and net.op_type(name) not in FIXED_OPS)


class _CutProblem:
    def __init__(self, net: Network, decisions: dict[str, Decision], movable: dict[str, None],
                 keep_io_types: bool) -> None:
        self.net, self.decisions, self.movable = net, decisions, movable
        graph = net.model.graph
        initializers = {t.name for t in graph.initializer}
        self.inputs = {v.name for v in graph.input if v.name not in initializers}
        self.outputs = {v.name for v in graph.output} if keep_io_types else set()
        self.keep_io_types = keep_io_types
        self.tensors = self._tensors()

    def _tensors(self) -> list[tuple[object, list[object]]]:
        """(producer label or node, [consumer labels or nodes]) of every main-graph float tensor that can cost a Cast."""
        net = self.net
        found = []
        seen: set[str] = set()
        sources = [(t, None) for t in self.inputs] + [
            (t, n) for n in net.names if n not in net.parent for t in net.float_outputs(n)]
        for tensor, producer in sources:
            if tensor in seen or tensor in net.constants or not net.is_float(tensor):
                continue
            seen.add(tensor)
            made = self._produced(tensor, producer)
            if made is None:
                continue
            needs = [need for c in net.consumers.get(tensor, []) if (need := self._needed(c, tensor)) is not None]
            if tensor in self.outputs and (label := _LABEL_OF_TYPE.get(net.tensor_types.get(tensor))) is not None:
                needs.append(label)
            if needs:
                found.append((made, needs))
        return found

    def _produced(self, tensor: str, producer: str | None):
        if producer is None:  # a graph input: its own type, or (keep_io_types=false) what its readers agree on
            return _LABEL_OF_TYPE.get(self.net.tensor_types.get(tensor)) if self.keep_io_types else ("free", tensor)
        return self._label(producer, tensor)

    def _needed(self, consumer: str, tensor: str):
        if consumer in self.net.parent or self.net.op_type(consumer) == "Cast":
            return None
        if self.decisions[consumer].precision in ("none", "mixed"):
            return None
        return self._label(consumer, tensor)

    def _label(self, name: str, tensor: str):
        if name in self.movable:
            return name
        precision = self.decisions[name].precision
        if precision in LOW_PRECISIONS:
            return LOW
        if precision == "fp32":
            return FP32
        return _LABEL_OF_TYPE.get(self.net.tensor_types.get(tensor))  # keep: the authored type

    def casts(self, labels: dict[str, int]) -> int:
        """The Casts this cost model counts when `labels` overrides movable nodes (default: low precision)."""
        def value(item):
            if isinstance(item, str):
                return labels.get(item, LOW)
            if isinstance(item, tuple):
                return None
            return item

        total = 0
        for made, needs in self.tensors:
            produced = value(made)
            wanted = {value(n) for n in needs} - {None}
            if produced is None:  # a free graph input takes one of the types it is read in
                total += max(len(wanted) - 1, 0)
            else:
                total += len(wanted - {produced})
        return total

    def solve(self) -> list[str]:
        """The movable nodes on the smallest FP32 (sink) side of a minimum cut: fewest Casts, then
        fewest nodes moved (the module's docstring says why that needs no tie-break edge)."""
        graph = CutGraph()
        ids: dict[object, int] = {}

        def vertex(item) -> int:
            if item == LOW:
                return SOURCE
            if item == FP32:
                return SINK
            if item not in ids:
                ids[item] = graph.add_vertex()
            return ids[item]

        for made, needs in self.tensors:
            producer = vertex(made)
            consumers = [vertex(n) for n in needs]
            if producer != SINK and any(c != SOURCE for c in consumers):
                copy = graph.add_vertex()  # y: an FP32 copy exists
                graph.add_edge(producer, copy, 1)
                for consumer in consumers:
                    graph.add_edge(copy, consumer, INFINITE)
            if producer != SOURCE and any(c != SINK for c in consumers):
                copy = graph.add_vertex()  # z (label 0): a low-precision copy exists
                graph.add_edge(copy, producer, 1)
                for consumer in consumers:
                    graph.add_edge(consumer, copy, INFINITE)
        sink_side = graph.sink_side()
        self.phases, self.scans = graph.phases, graph.scans
        return [name for name in self.movable if name in ids and ids[name] in sink_side]
