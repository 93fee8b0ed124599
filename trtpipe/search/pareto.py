"""The search's objective and its trade-off: low-precision FLOP share against error.

- `FlopShare` prices a plan: the share of the heavy compute (MatMul, Gemm, Conv;
  `trtpipe.precision.network.flops.node_flops` through the Network, so it counts what the
  plan document counts) that runs in low precision when the searched nodes in
  the FP32 set stay FP32 and the fixed nodes are as decided.
- `pareto_front`: the trials no other trial beats in both FLOP share (higher)
  and error (lower; the worst metric as a ratio to its bound, so the metrics of
  different outputs compare). Failing trials belong on the front too: they show
  what more FP16 would have cost.
- `chosen_trial`: the passing trial with the highest FLOP share; ties go to
  the lowest `memory_cost`, then fewer Casts, then the earlier trial. The
  chosen plan may sit behind the front in error: at equal share a cheaper
  plan is preferred to a more accurate one, since both pass.

Decision: `memory_cost` = Casts + FP32 nodes. Past the heavy FLOPs, what the
precision of a plan changes is memory traffic: a Cast is one extra pass over
a tensor, and a cheap (memory-bound) node kept FP32 moves twice the bytes of
its FP16 form, about one extra pass too. Counting only Casts would prefer the
all-FP32 plan (no Casts) whenever the FLOP shares tie; counting only FP32
nodes would cut FP32 islands into pieces that each cost two Casts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from trtpipe.precision.network.flops import node_flops
from trtpipe.precision.network.network import Network
from trtpipe.search.trials import Trial


class FlopShare:
    def __init__(self, net: Network, searchable: Iterable[str], fixed_low: Iterable[str]) -> None:
        flops = {name: node_flops(net, name) for name in net.names}
        self.total = sum(flops.values())
        self.fixed_low = sum(flops[name] for name in fixed_low)
        self.searchable = {name: flops[name] for name in searchable}

    def heavy(self, name: str) -> bool:
        """A searched node whose precision changes the FLOP share."""
        return self.searchable.get(name, 0) > 0

    def flops(self, name: str) -> int:
        return self.searchable.get(name, 0)

    def share(self, fp32: Iterable[str]) -> float:
        """Low-precision share of all heavy FLOPs with the searched nodes in `fp32` kept FP32."""
        if not self.total:
            return 0.0
        kept = sum(self.searchable.get(name, 0) for name in set(fp32))
        return (self.fixed_low + sum(self.searchable.values()) - kept) / self.total


def error_of(trial: Trial) -> float:
    ratio = (trial.worst or {}).get("ratio")
    return math.inf if ratio is None or math.isnan(ratio) else float(ratio)


def pareto_front(trials: list[Trial]) -> list[Trial]:
    """Trials not dominated in (FLOP share up, error down), by FLOP share descending."""
    front = []
    for trial in trials:
        share, error = trial.low_precision_flop_share, error_of(trial)
        dominated = any(
            other.low_precision_flop_share >= share and error_of(other) <= error
            and (other.low_precision_flop_share > share or error_of(other) < error)
            for other in trials
        )
        if not dominated:
            front.append(trial)
    # Equal points (the same share and error) keep only their first trial.
    unique: dict[tuple, Trial] = {}
    for trial in front:
        unique.setdefault((trial.low_precision_flop_share, error_of(trial)), trial)
    return sorted(unique.values(), key=lambda t: (-t.low_precision_flop_share, error_of(t), t.trial))


def chosen_trial(trials: list[Trial]) -> Trial | None:
    passing = [trial for trial in trials if trial.passed]
    if not passing:
        return None
    return min(passing, key=lambda t: (-t.low_precision_flop_share, memory_cost(t), t.casts, t.trial))


def memory_cost(trial: Trial) -> int:
    """Casts + FP32 nodes (see the module docstring)."""
    return trial.casts + trial.fp32_count


def front_json(front: list[Trial]) -> list[dict]:
    return [{"trial": t.trial, "low_precision_flop_share": round(t.low_precision_flop_share, 6),
             "error_ratio": _json_ratio(error_of(t)), "passed": t.passed, "fp32_count": t.fp32_count, "casts": t.casts}
            for t in front]


def _json_ratio(value: float):
    return "inf" if math.isinf(value) else round(value, 6)


def chosen_json(chosen: Trial | None, automatic: Trial | None, why: str) -> dict:
    if chosen is None:
        return {"trial": None, "why": why}
    entry: Mapping = {
        "trial": chosen.trial,
        "low_precision_flop_share": round(chosen.low_precision_flop_share, 6),
        "fp32_count": chosen.fp32_count,
        "casts": chosen.casts,
        "error_ratio": _json_ratio(error_of(chosen)),
        "why": why,
    }
    if automatic is not None:
        entry = {**entry, "automatic_low_precision_flop_share": round(automatic.low_precision_flop_share, 6)}
    return dict(entry)
