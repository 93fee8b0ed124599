"""How many Casts each protective reason cost: `totals.casts_by_reason` of the plan.

Every Cast the materialiser added (casts.py report) is charged to one reason:
- a Cast into a graph output, or of a graph input: `keep_io_types` (the graph's
  I/O keeps its type);
- a Cast to FP32: the reason of the FP32 node that reads it (the first in the
  network's order); a Cast to FP16/BF16: the reason of the FP32 node producing it;
- a node that is FP32 only to save Casts or as a smoothed island (fewest_casts.py,
  smoothing.py) passes the charge on to the FP32 node its island protects (the
  nearest one through FP32 neighbours).

A reason is named by its kind: `rule <name>`, `authored`, or the automatic rule
(`activation range`, `normalization group`, `constant`, `boundary`, `stored
tensor`, `subnormal scale`), or the schema a Q/DQ is written in (`opset < 19`: the node is FP32
whatever its neighbours, qdq_plan.py); a Cast none of these explains is `other`.
"""

from __future__ import annotations

from collections import Counter, deque

from trtpipe.precision.auto.qdq_plan import REASON_KINDS as QDQ_KINDS
from trtpipe.precision.network.decisions import Decision
from trtpipe.precision.network.network import Network

JOINED = ("fewest Casts", "smoothing")
IO = "keep_io_types"


def casts_by_reason(net: Network, decisions: dict[str, Decision], casts_added: list[dict]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for cast in casts_added:
        counts[_charge(net, decisions, cast)] += 1
    return dict(sorted(counts.items()))


def _charge(net: Network, decisions: dict[str, Decision], cast: dict) -> str:
    tensor = cast["tensor"]
    if any(str(c).startswith("graph output") for c in cast["consumers"]) or tensor not in net.producer:
        return IO
    if cast["to"] == "fp32":
        readers = [c for c in cast["consumers"] if c in decisions and decisions[c].precision == "fp32"]
        return reason_kind(net, decisions, readers[0]) if readers else "other"
    producer = net.producer[tensor]
    return reason_kind(net, decisions, producer) if decisions[producer].precision == "fp32" else "other"


def reason_kind(net: Network, decisions: dict[str, Decision], name: str) -> str:
    """The kind of reason that makes `name` FP32, looking past nodes that only joined an island."""
    seen, queue = {name}, deque([name])
    while queue:
        current = queue.popleft()
        decision = decisions[current]
        if not decision.reason.startswith(JOINED):
            return _kind(decision)
        for other in net.neighbours(current):
            if other not in seen and decisions[other].precision == "fp32":
                seen.add(other)
                queue.append(other)
    return _kind(decisions[name])


def _kind(decision: Decision) -> str:
    if decision.reason.startswith(QDQ_KINDS):  # a Q/DQ's own kinds, structure decisions included
        return next(kind for kind in QDQ_KINDS if decision.reason.startswith(kind))
    if decision.source == "rule":
        return " ".join(decision.reason.split()[:2])
    if decision.source in ("authored", "default", "structure"):
        return decision.source
    head = decision.reason.split(":")[0]
    return "constant" if head.startswith("constant ") else head

