"""The repair: when the automatic plan breaks a bound, move the fewest FLOPs to FP32 that make every
bound hold, decided by trial under the emulation (the search's machinery: `TrialRunner`,
`SearchSteps`, `FlopShare`).

The automatic rules keep FP32 what the sample ranges say must be; a plan can still fail where
error enters without overflowing (a Tanh fed by a massive T5 channel, a side output whose
logits amplify FP16 rounding). A recipe promises an accurate engine, so a failing plan is a
starting point, not the end.

Algorithm (deterministic: orders are topological and by FLOPs; only `max_seconds` can cut it short):
1. Check: the automatic plan, exactly as decided, on every sample input. If it passes, nothing
   changes (the plan is written byte for byte as without the repair).
2. Grow from localisation: localise the failing plan (every origin: where error or inf/NaN
   enters the graph, `validate/localize.py`) and add to FP32 the low-precision nodes upstream of
   each origin within `radius` edges (the origin itself at radius 0; an FP32 origin amplifies its
   inputs' error, so its region is what feeds it). The region doubles (1, 2, 4, ... edges) while
   the origins stay where they were; new origins mean the error moved on and are grown from at
   radius 1. Regions, not single nodes: an FP16 error is seldom one node's, and one trial per
   region is what keeps a 300 MB model's repair in minutes. At most half the trial budget.
3. Escalate when growing did not pass: every cheap node FP32 (costs no FLOPs, only Casts), then
   every node the repair may move FP32 (the most accurate plan it can reach). If that fails too,
   no plan passes: the tolerance is out of reach by the repair.
4. Shrink: give back to low precision what the passing plan does not need, with the search's
   `release`: the heavy nodes added, largest FLOPs first, by halves of equal FLOPs; then
   substitute: each heavy node still needed is tried against cheaper heavy nodes near it, every
   cheap node FP32, the first passing swap kept (`substitution.py`); then the cheap nodes island
   by island, farthest from the heavy nodes kept FP32 first, a single node refused when its release adds Casts; then `confirm` against the
   final plan while the budget lasts. FLOPs before Casts: the heavy decisions come first, so
   the cheap release spends only what budget they leave.

What the repair never moves: the automatic plan's FP32 nodes stay FP32 (it only adds), and
nodes decided by user rules, kept as authored, or structure (Casts, integer paths).

Decisions:
- The repair judges by the search's bounds (`precision.search.tolerance`/`outputs`, which are
  validate's unless set), on the same sample inputs the validate stage draws, so a repaired
  plan passes the emulated candidate of `validate` by construction (the reference is the
  precision stage's input model, numerically the sanitized model `validate` runs).
- When no plan in the budget passes, the automatic plan is kept (a plan seen failing is never
  handed back as an answer, `fp32_set.py`'s rule): validate then fails with its localisation,
  and the stage line gives the best trial's numbers and the override that widens the budget.
- Every trial is in `precision/repair.json` (no wall-clock times: the artifact is cached and two
  identical runs write identical bytes); times go to the log.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from trtpipe.precision.network.decisions import Decision
from trtpipe.precision.network.network import Network, name_nodes_as_parser_does, network_from_model
from trtpipe.search.fp32_set import PlanSplit, split_plan
from trtpipe.search.moves import PROGRESS, SearchSteps
from trtpipe.search.pareto import FlopShare, error_of
from trtpipe.search.substitution import distances, substitute_stand_ins
from trtpipe.search.trials import Trial, TrialRunner, worst_json, worst_text
from trtpipe.validate.compare import Tolerances

REPAIR_FORMAT = 1
MAX_RADIUS = 64  # edges upstream of an origin; beyond it the grow phase hands over to escalation


@dataclass
class RepairResult:
    repaired: bool  # the automatic plan failed and a passing plan was found
    checked: Trial  # the automatic plan's trial
    decisions: dict[str, Decision]  # the plan to write: repaired, or the automatic plan unchanged
    added: list[str] = field(default_factory=list)  # nodes moved to FP32, topological order
    trials: list[Trial] = field(default_factory=list)
    chosen: Trial | None = None  # the repaired plan's trial
    best_failing: Trial | None = None  # when nothing passed: the trial closest to passing
    ended_by: str | None = None  # "max_trials (40)" / "max_seconds (600)" when a budget ended it
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        """Trials beyond the check ran (the automatic plan failed)."""
        return not self.checked.passed

    def to_json(self) -> dict:
        return {
            "format": REPAIR_FORMAT,
            "automatic_plan_passed": self.checked.passed,
            "repaired": self.repaired,
            "added_fp32": self.added,
            "before": _trial_summary(self.checked),
            "after": _trial_summary(self.chosen) if self.chosen else None,
            "best_failing": _trial_summary(self.best_failing) if self.best_failing else None,
            "ended_by": self.ended_by,
            "trials": [trial.to_json() for trial in self.trials],
        }


def repair_plan(
    model: onnx.ModelProto,
    decisions: Mapping[str, Decision],
    feeds: list[dict[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    max_trials: int,
    max_seconds: float,
    low_precision: str = "fp16",
    keep_io_types: bool = True,
    shapes_of: Network | None = None,
    switched: bool = True,
    float_model: Path | None = None,
) -> RepairResult:
    """Check the automatic plan `decisions` (from `plan_precision` on `model`) and repair it when it
    fails; see the module docstring. `shapes_of`: the stage's network, whose shapes as the sample data
    gives them (`run_shapes`) price the FLOPs as the plan document does (a dynamic dim counts as 1
    without them: basic-pitch's Convs read 98.0% where the plan says 99.7%)."""
    start = time.perf_counter()
    working = onnx.ModelProto()
    working.CopyFrom(model)
    name_nodes_as_parser_does(working)
    net = network_from_model(working)
    if shapes_of is not None:
        net.run_shapes, net.run_counts, net.run_levels = shapes_of.run_shapes, shapes_of.run_counts, shapes_of.run_levels
    split = split_plan(net, decisions, low_precision, guard_constants=False)
    runner = TrialRunner(working, split.fixed_precision, split.searchable, feeds, tolerances, low_precision,
                         keep_io_types, switched, float_model=float_model)
    share = FlopShare(net, split.searchable, split.fixed_low)
    steps = SearchSteps(runner, max_trials, share, label="repair")
    automatic = frozenset(split.automatic_fp32)
    steps.trial(automatic, "automatic plan", automatic)
    checked = steps.log[0]
    steps.deadline = start + max_seconds  # the check always runs: the budget is for the repair
    if checked.passed:
        return RepairResult(False, checked, dict(decisions), seconds=time.perf_counter() - start)
    if _switched_disagrees(runner, automatic, passed=False):
        return _again_in_full(model, decisions, feeds, tolerances, max_trials, max_seconds, low_precision,
                              keep_io_types, shapes_of, float_model)
    PROGRESS.info("    repair: the automatic plan fails (%s); repairing", worst_text(checked.worst))
    grown, passed, origins = _grow(steps, net, split, automatic)
    passing = grown if passed else _escalate(steps, split, share, grown)
    ended_by = _budget_spent(steps)
    if passing is None:
        best = min(steps.log, key=error_of)
        return RepairResult(False, checked, dict(decisions), trials=steps.log, best_failing=best,
                            ended_by=ended_by, seconds=time.perf_counter() - start)
    final = _shrink(steps, net, split, share, origins, passing)
    if _switched_disagrees(runner, final, passed=True):
        return _again_in_full(model, decisions, feeds, tolerances, max_trials, max_seconds, low_precision,
                              keep_io_types, shapes_of, float_model)
    ended_by = _budget_spent(steps)
    added = [name for name in split.searchable if name in final and name not in automatic]
    chosen = steps.trial_of[final]
    return RepairResult(
        True, checked, _repaired_decisions(decisions, added, final, steps, share, ended_by, origins), added=added,
        trials=steps.log, chosen=chosen, ended_by=ended_by, seconds=time.perf_counter() - start,
    )


def _switched_disagrees(runner: TrialRunner, plan: frozenset[str], passed: bool) -> bool:
    """Decision (the search's, fp32_set.py): the switched emulation is tested bit for bit against each
    candidate's own, and the verdicts the repair acts on (the automatic plan fails, the repaired plan
    passes) are confirmed on the validate stage's emulation; should a model make them disagree, the
    repair runs again the slow way rather than trusting it. One emulated run, only when it repairs."""
    return bool(runner.emulations["switched"]) and runner.evaluate_in_full(plan).passed != passed


def _again_in_full(model, decisions, feeds, tolerances, max_trials, max_seconds, low_precision, keep_io_types,
                   shapes_of, float_model) -> RepairResult:
    PROGRESS.warning("precision repair: the switched emulation disagrees with the full one; repairing again "
                     "with one emulated graph per trial")
    return repair_plan(model, decisions, feeds, tolerances, max_trials=max_trials, max_seconds=max_seconds,
                       low_precision=low_precision, keep_io_types=keep_io_types, shapes_of=shapes_of, switched=False,
                       float_model=float_model)


def repair_note(result: RepairResult, max_trials: int, max_seconds: float) -> str:
    """The stage line's account of the repair ("" when the automatic plan passed as decided)."""
    if not result.ran:
        return ""
    before, trials = result.checked, len(result.trials)
    if result.repaired:
        after = result.chosen
        metric = (before.worst or {}).get("metric")
        change = ""
        if metric in before.errors and metric in after.errors:
            change = f", {metric} {_value(metric, before.errors[metric])} -> {_value(metric, after.errors[metric])}"
        shares = _shares(before.low_precision_flop_share, after.low_precision_flop_share)
        return (f"; repaired: +{len(result.added)} FP32 nodes (reason 'repair' in the plan), FLOPs "
                f"{shares}{change} ({trials} trials)")
    best = result.best_failing
    text = (f"; repair: NO passing plan in {trials} trials (best: trial {best.trial}, {best.fp32_count} FP32 nodes, "
            f"{best.low_precision_flop_share:.1%} FLOPs low precision, {worst_text(best.worst)})")
    if result.ended_by is None:  # every node it may move was FP32 and still failed: no budget helps
        return text + ("; the bound is out of reach by precision: every node the repair may move was FP32 in a "
                       "failing trial")
    return text + (f"; Fix: widen the budget: precision.repair.max_trials={2 * max_trials} "
                   f"precision.repair.max_seconds={2 * max_seconds:g}")


def _shares(before: float, after: float) -> str:
    """`before -> after` as percentages, with a second decimal when one would show them equal (a
    repair that moved 0.02% of the FLOPs read "100.0% -> 100.0%" on basic-pitch)."""
    digits = 1 if f"{before:.1%}" != f"{after:.1%}" or before == after else 2
    return f"{before:.{digits}%} -> {after:.{digits}%}"


def _value(metric: str, value: float) -> str:
    """A metric as the verdict table shows it: agreement metrics to 6 decimals (0.9999 of a cosine
    would hide 0.99985 failing a bound of 0.9999), the others to 4 significant digits."""
    return f"{value:.6f}" if metric in ("cosine", "argmax_agree") else f"{value:.4g}"


def _grow(steps: SearchSteps, net: Network, split: PlanSplit,
          automatic: frozenset[str]) -> tuple[frozenset[str], bool, frozenset[str]]:
    """Step 2: the plan grown around localisation's origins, whether it passes, and the cheap origins it
    moved (kept by the shrink: see `_shrink`)."""
    state, radius, previous, moved_origins = automatic, 0, frozenset(), frozenset()
    until = max(2, steps.max_trials // 2)
    while steps.spent < until:
        origins = _origins(steps.runner, state, net)
        if not origins:
            return state, False, moved_origins  # nothing above the localisation threshold: the error is diffuse
        # The same origins after a trial: the region was too small, double it; new ones: the error
        # moved on, start again at the origins themselves.
        radius = (radius * 2 or 1) if previous and origins <= previous else 0
        previous = origins
        movable = set(split.searchable) - state
        region = _upstream(net, origins, radius, movable)
        while not region and radius < MAX_RADIUS:
            radius = radius * 2 or 1
            region = _upstream(net, origins, radius, movable)
        if not region:
            return state, False, moved_origins
        moved_origins |= region & origins
        grown = state | region
        outcome = steps.trial(grown, f"grow {len(region)} node(s) within {radius} edge(s) of {_names(origins)}",
                              state, until)
        if outcome is None:
            return state, False, moved_origins
        state = grown
        if outcome.passed:
            return state, True, moved_origins
    return state, False, moved_origins


def _escalate(steps: SearchSteps, split: PlanSplit, share: FlopShare, grown: frozenset[str]) -> frozenset[str] | None:
    """Step 3: every cheap node FP32, then every searchable node FP32; None when neither passes."""
    cheap = frozenset(name for name in split.searchable if not share.heavy(name))
    for plan, step in ((grown | cheap, "every cheap node FP32"), (frozenset(split.searchable), "every node FP32")):
        outcome = steps.trial(plan, step, grown)
        if outcome is not None and outcome.passed:
            return plan
    return None


def _shrink(steps: SearchSteps, net: Network, split: PlanSplit, share: FlopShare, origins: frozenset[str],
            state: frozenset[str]) -> frozenset[str]:
    """Step 4: release what the passing plan `state` holds FP32 beyond the automatic plan and does not
    need, except the cheap `origins` the grow phase moved.

    Decision: a cheap node that localisation named as an origin (error enters there) is not tried
    again: it costs no FLOPs, only Casts, and on the built-in transformer under naive_fp16 trying
    them took 28 of 31 trials to save 3 FP32 nodes. Heavy origins are tried like every heavy node:
    their FLOPs are what the repair minimises.
    Decision: when the passing plan holds heavy nodes, one trial first asks whether every cheap node
    FP32 passes without them: FLOPs are the objective, Casts only the tie-break. On issue 30's T5
    (seed 3) the grown region's block-1 `wi_0` MatMul (5.9% of the FLOPs) was kept otherwise.
    Decision: the cheap nodes go back island by island (nodes joined by an edge), farthest from the
    heavy nodes kept FP32 first, then in topological order (`_farthest_first`), an island that fails
    split in halves: a grown region is mostly needed or mostly not, and
    releasing a whole island removes its Casts. One chunk of every cheap node, split in halves, took
    the 14 trials left on issue 30's T5 to free 1 of 64 (they were needed around the heavy nodes
    that stayed FP32).
    Decision: the substitution runs before the cheap release, on the plan the heavy release left:
    it lowers the FLOPs and the cheap release only Casts, and run after it, the cheap release spent
    the whole budget of issue 30's T5 seed 2 (40 trials) before a stand-in was tried. The cheap
    release then takes the cheap nodes of whatever plan the substitution kept (a stand-in judged
    with every cheap node FP32 may have brought them all)."""
    topological = {name: index for index, name in enumerate(split.searchable)}
    automatic = set(split.automatic_fp32)
    added = [name for name in split.searchable if name in state and name not in automatic]
    heavy = sorted((n for n in added if share.heavy(n)), key=lambda n: (-share.flops(n), topological[n]))
    if heavy:  # FLOPs first: could every cheap node FP32 (no FLOPs, only Casts) stand in for the heavy ones?
        instead = (state - frozenset(heavy)) | frozenset(n for n in split.searchable if not share.heavy(n))
        outcome = steps.trial(instead, "every cheap node FP32 instead of the heavy ones", state)
        if outcome is not None and outcome.passed:
            state = instead
            added = [name for name in split.searchable if name in state and name not in automatic]
    state, _ = steps.release(state, [heavy], "release heavy", steps.max_trials, split_by_flops=True)
    state, heavy = substitute_stand_ins(steps, net, split.searchable, share, state, [n for n in heavy if n in state])
    cheap = [n for n in split.searchable if n in state and n not in automatic and not share.heavy(n)
             and n not in origins]
    islands = _farthest_first(_islands(split.searchable, cheap, net.neighbours), [n for n in heavy if n in state], net)
    state, _ = steps.release(state, islands, "release cheap", steps.max_trials, no_more_casts=True)
    return steps.confirm(state, [n for n in heavy if n in state], "confirm")


def _farthest_first(islands: list[list[str]], held: list[str], net: Network) -> list[list[str]]:
    """`islands` ordered by their edges from the nearest heavy node in `held` (the heavy nodes the repair
    keeps FP32), farthest first; ties (and no heavy node held) keep their order.

    Why: error enters where the held heavy nodes are, and the cheap nodes beside them are the ones
    the plan is likely to need with them; an island far away goes back in one trial, one beside them
    splits in halves for many. The budget then frees the most nodes per trial. Measured on issue 30's
    T5 (its substitution leaves every cheap node FP32 to release): seed 2 152 -> 136 FP32 nodes, 61 ->
    53 Casts; seed 3 124 -> 107, 54 -> 35, in the same 40 trials and at the same FLOP share."""
    if not held:
        return islands
    nearest: dict[str, int] = {}
    for name in held:
        for other, edges in distances(net, name).items():
            nearest[other] = min(nearest.get(other, edges), edges)
    far = len(net.nodes)  # an island not connected to a held node: farthest of all
    return sorted(islands, key=lambda island: -min(nearest.get(n, far) for n in island))


def _islands(order: list[str], members: list[str], linked) -> list[list[str]]:
    """`members` in connected groups (`linked(name)`: the nodes sharing an edge with `name`), each in
    `order`, the groups ordered by their first node."""
    position = {name: index for index, name in enumerate(order)}
    left, islands = set(members), []
    for start in sorted(members, key=position.__getitem__):
        if start not in left:
            continue
        island, stack = [], [start]
        left.discard(start)
        while stack:
            name = stack.pop()
            island.append(name)
            for other in linked(name):
                if other in left:
                    left.discard(other)
                    stack.append(other)
        islands.append(sorted(island, key=position.__getitem__))
    return islands


def _origins(runner: TrialRunner, state: frozenset[str], net: Network) -> frozenset[str]:
    """Nodes of the network where localisation of the plan `state` finds error entering, on any sample input."""
    found = set()
    for localization in runner.localize(state):
        for origin in localization.findings():
            name = origin.get("node")
            if name in net.nodes:
                found.add(name)
            elif origin.get("tensor") in net.producer:  # a Cast the materialiser inserted: its source
                found.add(net.producer[origin["tensor"]])
    return frozenset(found)


def _upstream(net: Network, origins: frozenset[str], radius: int, movable: set[str]) -> frozenset[str]:
    """The movable nodes among `origins` and the nodes at most `radius` edges upstream of them."""
    region, frontier, visited = set(), set(origins), set(origins)
    for depth in range(radius + 1):
        region |= frontier & movable
        if depth == radius:
            break
        frontier = {net.producer[t] for n in frontier for t in net.nodes[n].input if t in net.producer} - visited
        visited |= frontier
    return frozenset(region)


def _budget_spent(steps: SearchSteps) -> str | None:
    if steps.out_of_time:
        return "max_seconds"
    return "max_trials" if steps.spent >= steps.max_trials else None


def _repaired_decisions(decisions: Mapping[str, Decision], added: list[str], final: frozenset[str],
                        steps: SearchSteps, share: FlopShare, ended_by: str | None,
                        origins: frozenset[str]) -> dict[str, Decision]:
    result = dict(decisions)
    added_in = {}
    for trial in steps.log:
        for name in trial.fp32_added:
            added_in.setdefault(name, trial)
    for name in added:
        kind = f"{share.flops(name):,} FLOPs" if share.heavy(name) else "no heavy FLOPs: costs only Casts"
        failed = steps.needed_in(final, name)
        first = added_in.get(name)
        why = f"added in trial {first.trial} ({first.step})" if first else "added"
        if failed is None and name in origins and not share.heavy(name):
            why += "; localisation found the error entering there (a cheap origin is kept without a trial)"
        elif failed is None:
            why += f"; not tried alone against the final plan ({ended_by or 'budget'} reached)"
        elif failed.passed:
            why += f"; trial {failed.trial} releasing it alone passed but needed {failed.casts} Casts"
        else:
            why += f"; trial {failed.trial} releasing it alone failed ({worst_text(failed.worst)})"
        result[name] = Decision("fp32", f"repair: kept FP32 ({kind}) so that every bound holds: {why}", "repair",
                                decisions[name].observed_max_abs)
    return result


def _trial_summary(trial: Trial) -> dict:
    return {"trial": trial.trial, "fp32_count": trial.fp32_count, "casts": trial.casts,
            "low_precision_flop_share": round(trial.low_precision_flop_share, 6), "passed": trial.passed,
            "worst": worst_json(trial.worst)}


def _names(nodes: frozenset[str], limit: int = 2) -> str:
    listed = sorted(nodes)
    return ", ".join(listed[:limit]) + (f" (+{len(listed) - limit} more)" if len(listed) > limit else "")

