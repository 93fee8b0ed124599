"""The precision of an If/Loop/Scan node is the precision of its body.

A control-flow node computes nothing itself: its bodies do. Labelling an If
`fp16` while its branches stay FP32 (or the reverse) would misreport exactly
the compute users look at. Decisions:
- a control-flow node starts as `keep`: the materialiser keeps a Loop/Scan's
  own inputs and outputs as authored (a carried state keeps one type across
  iterations) and gives an If's outputs the type its branches agree on
  (materialize.py, if_outputs.py);
- once every body node is decided, it takes the body's precision when all its
  float-computing body nodes (nested bodies included) agree, `mixed` when they
  do not, and `none` when its body computes no float; the reason counts them.
  Casts and integer nodes do not count (they compute in no precision of their
  own); nodes kept as the author wrote them count as `keep`;
- a rule that names a control-flow node applies to every node of its bodies
  (rules.py), since that is the only way the node itself can be "in fp32".
"""

from __future__ import annotations

from collections import Counter

from trtpipe.precision.network.decisions import Decision
from trtpipe.precision.network.network import Network

PLANNED = ("fp32", "fp16", "bf16")


def control_flow_initial() -> Decision:
    return Decision("keep", "control flow: its precision is its body's (set once the body is decided)", "structure")


def derive_control_flow(net: Network, decisions: dict[str, Decision]) -> None:
    """Set every control-flow node's decision from its bodies' decisions, in place."""
    for name in net.names:
        if not net.is_control_flow(name):
            continue
        counts = Counter(_computes_in(decisions[n]) for n in _body_nodes(net, name) if _computes_in(decisions[n]))
        if not counts:
            decisions[name] = Decision("none", f"{net.op_type(name)}: its body computes no float", "structure")
            continue
        described = ", ".join(f"{count} {precision}" for precision, count in sorted(counts.items()))
        precision = next(iter(counts)) if len(counts) == 1 else "mixed"
        decisions[name] = Decision(precision, f"{net.op_type(name)}: its body nodes are {described}", "structure")


def _computes_in(decision: Decision) -> str | None:
    if decision.precision in PLANNED:
        return decision.precision
    return "keep" if decision.source == "authored" else None


def _body_nodes(net: Network, name: str):
    """Every node inside the bodies of `name`, nested bodies included (their control nodes excluded)."""
    stack = list(net.bodies.get(name, ()))
    while stack:
        inner = stack.pop()
        if net.is_control_flow(inner):
            stack.extend(net.bodies[inner])
        else:
            yield inner
