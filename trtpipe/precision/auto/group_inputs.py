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
through `ARITHMETIC` nodes (Add/Sub/Mul/Div) and `SHAPE_ONLY` ones (Reshape,
Transpose, ...: exporters permute around norms), bounded by every other node
(heavy nodes, other groups, reductions) and by nodes a user rule or the author
set to low precision. Nodes already FP32 (the range rule: a stream beyond
max_abs) are walked through, not stopped at: the Muls next to an FP32 Add
join. In a residual network that region is the running sum, its Adds and the
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
- Decided after the user rules (planner.py), over the groups the automatic
  rules kept FP32 that are still FP32 after them: a rule setting a norm to FP16
  leaves no region behind (its input is rounded anyway), and user rules always
  win. Only nodes whose precision is still `precision.default` move, only FP16 ->
  FP32 (every stored tensor's range was checked where the plan wrote it: a
  region node produced its output in FP16 before), not in If/Loop/Scan bodies
  nor producing a tensor a body reads (each body would need its own Cast, as in
  fewest_casts.py).
- Shape-only nodes carry no arithmetic: one joins when both its input's producer
  and one of its readers are FP32 (region, group or already FP32): FP32 then
  costs no Cast where FP16 costs two and re-rounds x (on the path into the norm,
  that rounding is the very loss). One at the region's edge (an FP32 side and
  only FP16 on the other) costs one Cast either way and is left to
  fewest_casts.py, which counts that exactly.
- No heavy node (MatMul/Conv/Gemm/...) moves: the FP16 FLOP share is unchanged.
- Each node's reason names the group and tensor it serves (the nearest FP32
  group input its output reaches through the region; else the one whose running
  computation it is part of) and u * sqrt(r), u the planned type's rounding
  (FP16 2^-11, BF16 2^-8), r measured over the reference rows (u alone when r
  is not measured: RMSNorm, no kept statistics, BF16), so the plan says what the
  region buys; `casts_by_reason` counts its Casts as
  "normalization input".
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable

from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.auto.evidence_groups import ROUNDING, Moments, statistics_error
from trtpipe.precision.network.network import Network
from trtpipe.precision.auto.norm_groups import SOFTMAX_OPS

ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})
# No arithmetic, the same values rearranged (layernorm_groups.PASSTHROUGH without Expand, which
# duplicates, plus the permutes exporters write around norms).
SHAPE_ONLY = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
REASON = "normalization input"
# The planned low-precision type's relative rounding (half an ulp) and how the reason writes it.
UNIT_ROUNDING = {"fp16": (2.0**-11, "2^-11", "FP16"), "bf16": (2.0**-8, "2^-8", "BF16")}


def fp32_groups(net: Network, decisions: dict[str, Decision], groups: dict[str, str]) -> set[str]:
    """Labels of the LayerNorm/RMSNorm groups the automatic rules keep FP32 (call before the user rules)."""
    return {label for label, names in _members(groups).items() if _fp32_norm_group(net, decisions, names, True)}


def input_decisions(net: Network, decisions: dict[str, Decision], groups: dict[str, str], labels: set[str],
                    observed, moments: dict[str, Moments] | None,
                    low: str) -> dict[str, tuple[str, float | None]]:
    """node -> (reason, magnitude) for the cheap nodes computing the input of the groups `labels` (from
    `fp32_groups`) that are still FP32 after the user rules (module docstring). `observed`: the reference
    run (auto_range.Observed) or None; `low`: the planned low-precision type."""
    unit, unit_text, type_text = UNIT_ROUNDING[low]
    read_in_bodies = net.tensors_read_in_bodies()

    def main_graph(name: str) -> bool:
        return name not in net.parent and not any(t in read_in_bodies for t in net.nodes[name].output)

    def movable(name: str) -> bool:
        decision = decisions[name]
        return decision.source == "default" and decision.precision in LOW_PRECISIONS and main_graph(name)

    def walkable(name: str) -> bool:
        """Cheap (arithmetic or shape-only), not in a group, and either movable or already FP32."""
        return (net.op_type(name) in ARITHMETIC | SHAPE_ONLY and name not in groups and main_graph(name)
                and (movable(name) or decisions[name].precision == "fp32"))

    served: dict[str, str] = {}  # group input tensor x -> the group label reading it
    region: set[str] = set()
    for label, names in _members(groups).items():
        if label not in labels or not _fp32_norm_group(net, decisions, names, False):
            continue
        for x in _external_inputs(net, names, set(names)):
            start = net.producer.get(x)
            if start is None or not walkable(start):
                continue
            served.setdefault(x, label)
            region |= _region(net, walkable, start)
    kept = _prune_shape_edges(net, decisions, region)
    # Only what still computes some x through kept nodes: a shape-only start dropped above (its producer is
    # heavy) does not bring in the other readers of its producer's output.
    starts = [s for s in (net.producer[x] for x in served) if s in kept]
    region = set().union(*(_region(net, kept.__contains__, s) for s in starts))
    losses = {label: _rounding_loss(names, observed, moments or {}) * unit / ROUNDING
              for label, names in _members(groups).items() if label in set(served.values())}
    found: dict[str, tuple[str, float | None]] = {}
    for name in sorted(region, key=net.position.__getitem__):
        if not movable(name):
            continue
        x, downstream = _served_by(net, region, served, name)
        label = served[x]
        if downstream and x in net.nodes[name].output:
            role = f"computes {x}, read by the FP32 {label}"
        elif downstream:
            role = f"computes {net.nodes[name].output[0]}, which reaches {x} read by the FP32 {label}"
        elif x in net.nodes[name].input:
            role = f"reads {x} as the FP32 {label} does (kept FP32 with it rather than re-rounded)"
        else:
            role = (f"part of the FP32 computation around {x}, read by the FP32 {label} (kept FP32 rather than "
                    f"re-rounded at each step)")
        if net.op_type(name) in SHAPE_ONLY:
            role += "; shape-only between FP32 nodes: FP32 costs no Cast, FP16 two"
        reason = (f"{REASON}: {role}: rounding {x} to {type_text} costs the group's output up to "
                  f"{losses[label]:.3g} relative RMS ({unit_text} * sqrt(E[x^2]/Var)), no less than the "
                  f"{type_text} rounding its FP32 avoids")
        found[name] = (reason, None)
    return found


def _members(groups: dict[str, str]) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for name, label in groups.items():
        members.setdefault(label, []).append(name)
    return members


def _fp32_norm_group(net: Network, decisions: dict[str, Decision], names: list[str], by_auto: bool) -> bool:
    """A LayerNorm/RMSNorm group whose planned members are all FP32 (`by_auto`: one of them by an
    automatic rule, by its own range or as a group)."""
    if any(net.op_type(n) in SOFTMAX_OPS for n in names):
        return False
    planned = [decisions[n] for n in names if decisions[n].source != "structure"]
    return (bool(planned) and all(d.precision == "fp32" for d in planned)
            and (not by_auto or any(d.source == "auto" for d in planned)))


def _external_inputs(net: Network, names: list[str], inside: set[str]) -> list[str]:
    """The float activations the group reads from outside (x; not its constants)."""
    seen: list[str] = []
    for name in names:
        for tensor in net.nodes[name].input:
            if (tensor and tensor not in net.constants and net.is_float(tensor)
                    and net.producer.get(tensor) not in inside and tensor not in seen):
                seen.append(tensor)
    return seen



def _region(net: Network, walkable: Callable[[str], bool], start: str) -> set[str]:
    """`start` and the walkable nodes connected to it through walkable nodes."""
    seen, queue = {start}, deque([start])
    while queue:
        for other in net.neighbours(queue.popleft()):
            if other not in seen and walkable(other):
                seen.add(other)
                queue.append(other)
    return seen


def _prune_shape_edges(net: Network, decisions: dict[str, Decision], region: set[str]) -> set[str]:
    """Drop the shape-only nodes without an FP32 node (region or already FP32) on both sides: at the
    region's edge FP32 costs one Cast as FP16 does (fewest_casts.py decides them)."""
    kept = set(region)

    def fp32(name: str | None) -> bool:
        return name is not None and (name in kept or decisions[name].precision == "fp32")

    changed = True
    while changed:
        changed = False
        for name in sorted(kept, key=net.position.__getitem__):
            if net.op_type(name) not in SHAPE_ONLY or decisions[name].precision == "fp32":
                continue
            node = net.nodes[name]
            readers = [c for t in node.output for c in net.consumers.get(t, [])]
            if not (node.input and fp32(net.producer.get(node.input[0])) and any(fp32(c) for c in readers)):
                kept.discard(name)
                changed = True
    return kept


def _served_by(net: Network, region: set[str], served: dict[str, str], name: str) -> tuple[str, bool]:
    """The group input `name` serves: the nearest one its output reaches through the region (True), else
    the nearest one in the region by any path (False). Ties follow network order."""
    for downstream in (True, False):
        seen, queue = {name}, deque([name])
        while queue:
            current = queue.popleft()
            outputs = net.nodes[current].output
            hit = [t for t in outputs if t in served]
            if hit:
                return hit[0], downstream
            if not downstream:
                hit = [t for t in net.nodes[current].input if t in served]
                if hit:
                    return hit[0], downstream
            nexts = ([c for t in outputs for c in net.consumers.get(t, [])] if downstream
                     else net.neighbours(current))
            for other in sorted(set(nexts), key=net.position.__getitem__):
                if other in region and other not in seen:
                    seen.add(other)
                    queue.append(other)
    raise AssertionError(f"{name} is in a region without a group input")


def _rounding_loss(names: list[str], observed, moments: dict[str, Moments]) -> float:
    """2^-11 * sqrt(r), r the worst E[x²] / Var over the reference rows; 2^-11 when not measured."""
    for name in names:
        if observed is not None and name in moments:
            found = moments[name]
            if found.form == "moment difference":  # the same E[x] and variance; statistics_error's x - E[x] bound
                found = dataclasses.replace(found, form="centred square")
            return max(statistics_error(observed, found), ROUNDING)
    return ROUNDING
