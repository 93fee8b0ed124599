"""The input of an FP32 normalization group is computed in FP32 where that costs no heavy math.

A LayerNorm/RMSNorm group kept FP32 (evidence_groups.py: its variance overflows,
or its FP16 statistics lose what the output needs) still reads its input x. When
x is produced by an FP16 node, x was rounded before the group reads it, and no
FP32 inside the group undoes that: the normalised output (x - E[x]) / std
carries an error of 2^-11 * |x| / std per element, 2^-11 * sqrt(r) in RMS over
a row, r = E[x²] / Var = 1 + E[x]² / Var >= 1 (for RMSNorm, x / rms(x): 2^-11).
That is never less than FP16's rounding of the group's own output (2^-11), the
error FP32 statistics are there to avoid: an FP32 group reading a rounded x
has sqrt(1 + r) >= 1.4 times the output error of one reading the exact x.

Measured on the built-in NAFNet (LayerNorm2d over 16 channels, 64 held-out
images): r has median 1.3 and maximum 4.2 per pixel on all four LayerNorm
inputs, so the statistics criterion (2^-11 * sqrt(r) <= 1e-3 < 2^-8) does not
fire and the groups are FP32 for their range alone; rounding x costs their
output 2.1e-4 relative RMS, as much as rounding that output to FP16 (2.1e-4).
The x of three of those groups is the residual stream (Add, values up to ~1300).

So x's producer joins the FP32 island when it is cheap arithmetic, and with it
the region of cheap arithmetic x is computed in: the nodes connected to it
through `ARITHMETIC` nodes (Add/Sub/Mul/Div), bounded by every other node (heavy
nodes, other groups, reductions, shape ops) and by anything not planned by the
default. In a residual network that region is the running sum, its Adds and the
per-channel scales of the branches added to it (NAFNet's `x * beta`): computed
once in FP32 and rounded where heavy FP16 nodes read it, instead of rounded after
every Add. Emulated on NAFNet (64 held-out inputs, paired against ModelOpt
AutoCast's defaults, which keep these nodes FP32 as their values exceed its
data_max 512): median rel_l2 ratio 1.020 [1.016, 1.024] before, 0.999
[0.995, 1.004] with the region FP32, Casts 10 -> 12, no heavy FLOP moved.

Decisions:
- Only groups the automatic rules keep FP32 as a whole (range, statistics,
  unmeasured fused norms; evidence_groups.py); an FP16 group reads a rounded x
  anyway and is left alone. Softmax is not a LayerNorm: its input rounding is
  absolute in the logits (bounded by the range rule), not relative to a row's
  spread, and is left alone.
- r does not gate the rule: the loss is >= 2^-11 whatever r is, and a limit
  between 1 and NAFNet's 4.2 would be a threshold fitted to one model. The
  statistics criterion (STATISTICS_LIMIT) still decides whether a group is FP32.
- Only nodes whose precision came from `precision.default` move, only FP16 ->
  FP32 (every stored tensor's range was checked where the plan wrote it: a
  region node produced its output in FP16 before), not in If/Loop/Scan bodies
  nor producing a tensor a body reads (each body would need its own Cast, as in
  fewest_casts.py). User rules come later in the planner and win.
- No heavy node (MatMul/Conv/Gemm/...) moves: the FP16 FLOP share is unchanged.
- The reason names the group and 2^-11 * sqrt(r) measured over the reference
  rows (2^-11 when r is not measured: RMSNorm, no kept statistics), so the plan
  says what the region buys; `casts_by_reason` counts its Casts as
  "normalization input".
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable

from trtpipe.precision.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.evidence_groups import ROUNDING, Moments, statistics_error
from trtpipe.precision.network import Network
from trtpipe.precision.norm_groups import SOFTMAX_OPS

ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})
REASON = "normalization input"


def input_decisions(net: Network, decisions: dict[str, Decision], groups: dict[str, str], observed,
                    moments: dict[str, Moments] | None) -> dict[str, tuple[str, float | None]]:
    """node -> (reason, magnitude) for the cheap arithmetic computing the input of FP32 LayerNorm/RMSNorm
    groups (module docstring). `observed`: the reference run (auto_range.Observed) or None."""
    members: dict[str, list[str]] = {}
    for name, label in groups.items():
        members.setdefault(label, []).append(name)
    found: dict[str, tuple[str, float | None]] = {}
    read_in_bodies = {t for n in net.names if n in net.parent for t in net.nodes[n].input if t}

    def cheap(name: str) -> bool:
        return (_cheap(net, decisions, groups, name)
                and not any(t in read_in_bodies for t in net.nodes[name].output))

    for label, names in members.items():
        if not _fp32_norm_group(net, decisions, names):
            continue
        inside = set(names)
        for x in _external_inputs(net, names, inside):
            start = net.producer.get(x)
            if start is None or start in found or not cheap(start):
                continue
            loss = _rounding_loss(names, observed, moments or {})
            reason = (f"{REASON}: computes {x}, read by the FP32 {label}: rounding it to FP16 costs the "
                      f"group's output up to {loss:.3g} relative RMS (2^-11 * sqrt(E[x^2]/Var)), no less than "
                      f"the FP16 rounding its FP32 avoids")
            for name in _region(net, cheap, start):
                found.setdefault(name, (reason, None))
    return found


def _fp32_norm_group(net: Network, decisions: dict[str, Decision], names: list[str]) -> bool:
    """A LayerNorm/RMSNorm group the automatic rules keep FP32 (by its own range or as a group)."""
    if any(net.op_type(n) in SOFTMAX_OPS for n in names):
        return False
    planned = [decisions[n] for n in names if decisions[n].source != "structure"]
    return bool(planned) and all(d.precision == "fp32" for d in planned) and any(d.source == "auto" for d in planned)


def _external_inputs(net: Network, names: list[str], inside: set[str]) -> list[str]:
    """The float activations the group reads from outside (x; not its constants)."""
    seen: list[str] = []
    for name in names:
        for tensor in net.nodes[name].input:
            if (tensor and tensor not in net.constants and net.is_float(tensor)
                    and net.producer.get(tensor) not in inside and tensor not in seen):
                seen.append(tensor)
    return seen


def _cheap(net: Network, decisions: dict[str, Decision], groups: dict[str, str], name: str) -> bool:
    decision = decisions[name]
    return (net.op_type(name) in ARITHMETIC and name not in groups and name not in net.parent
            and decision.source == "default" and decision.precision in LOW_PRECISIONS)


def _region(net: Network, cheap: Callable[[str], bool], start: str) -> list[str]:
    """`start` and the cheap arithmetic connected to it through cheap arithmetic, in network order."""
    seen, queue = {start}, deque([start])
    while queue:
        node = net.nodes[queue.popleft()]
        neighbours = [net.producer[t] for t in node.input if t in net.producer]
        neighbours += [c for t in node.output for c in net.consumers.get(t, [])]
        for other in neighbours:
            if other not in seen and cheap(other):
                seen.add(other)
                queue.append(other)
    return sorted(seen, key=net.position.__getitem__)


def _rounding_loss(names: list[str], observed, moments: dict[str, Moments]) -> float:
    """2^-11 * sqrt(r), r the worst E[x²] / Var over the reference rows; 2^-11 when not measured."""
    for name in names:
        if observed is not None and name in moments:
            found = moments[name]
            if found.form == "moment difference":  # the same E[x] and variance; statistics_error's x - E[x] bound
                found = dataclasses.replace(found, form="centred square")
            return max(statistics_error(observed, found), ROUNDING)
    return ROUNDING
