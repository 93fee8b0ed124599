"""Accuracy-driven precision search: a small set of nodes to keep FP32 so validation passes.

The automatic rules keep FP32 whatever *might* overflow (whole normalization
groups, every node above `precision.auto.max_abs`); the search asks the
emulator which of them the sample inputs actually need. A trial is one plan:
materialise it, run it on the faithful FP16 emulator, judge it against the FP32
reference with the validate stage's tolerances (`trtpipe.search.trials`).

Algorithm (every step deterministic: orders are ranks, then topological order):
1. Baselines: the automatic plan, then the all-low-precision plan.
2. Rank the searchable nodes by sensitivity (`trtpipe.search.sensitivity`): where
   localisation of the all-low plan says error enters, inf/NaN, magnitude
   beyond the low-precision range, normalization groups.
3. Grow from all-low: add every searchable node that localisation names as an
   origin of error in the current failing plan; when it names none, add the
   next nodes of the ranking (1, 2, 4, ... at a time). Stop at the first plan
   that passes, or when growing would exceed an automatic plan that passes.
4. Shrink the smaller passing set (grown or automatic), least sensitive
   nodes first: try removing a chunk; keep the removal when the plan still
   passes, otherwise split the chunk in two and try each half (nodes with
   direct evidence are tried one by one). Repeat for nodes found needed
   before a later removal, until the final plan without any one of its nodes
   fails: the answer is 1-minimal (every node is needed given the others),
   not guaranteed minimum (that would be exponential in trials).

What the search never moves: nodes decided by user rules, kept as authored,
structure (`none`, Casts), and the consumers of constants that do not fit the
low-precision type (the constants guard, `precision.auto.constants=keep_fp32`:
those constants are broken in FP16 for every input, not just the samples).

Decisions:
- The result is the last plan that passed, so its validation passes by
  construction; with `max_trials` exhausted it is still a passing plan, just
  possibly not shrunk all the way (said in the affected nodes' reasons).
- If no plan passes (the tolerance is out of reach by precision alone),
  `passed` is false and the plan is the automatic one: the search never
  hands back a plan it saw fail as if it were an answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import logging

import numpy as np
import onnx

from trtpipe.errors import UserError
from trtpipe.precision.authored import authored_decisions
from trtpipe.precision.auto_constants import constant_decisions
from trtpipe.precision.decisions import Decision, LOW_PRECISIONS, MATERIALIZE_AS
from trtpipe.precision.network import Network, name_nodes_as_parser_does, network_from_model
from trtpipe.search.rules_yaml import assumed_settings, fp32_rules, rules_yaml
from trtpipe.search.sensitivity import Sensitivity, rank_by_sensitivity
from trtpipe.search.trials import Outcome, Trial, TrialRunner, worst_json
from trtpipe.validate.compare import Tolerances

SEARCHABLE_SOURCES = ("default", "auto", "search")

PROGRESS = logging.getLogger("trtpipe")  # the pipeline logger: its INFO lines reach the console


@dataclass
class SearchResult:
    passed: bool
    fp32_nodes: list[str]  # searched nodes kept FP32, topological order: what the rules name
    fixed_fp32_nodes: list[str]  # FP32 for reasons the search does not touch (constants guard, user rules)
    automatic_fp32_nodes: list[str]  # searchable nodes the automatic plan kept FP32
    node_precision: dict[str, str]  # the final plan for `materialize`
    decisions: dict[str, Decision]  # the final plan with a reason per node
    rules: dict[str, dict]  # precision.rules reproducing the plan
    rules_yaml: str  # the same, ready to paste, with the settings it assumes
    trials: list[Trial]
    ranking: list[Sensitivity]
    worst: dict | None  # the final plan's metric closest to its bound
    seconds: float

    @property
    def fp32_count(self) -> int:
        return len(self.fp32_nodes) + len(self.fixed_fp32_nodes)

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "fp32_nodes": self.fp32_nodes,
            "fixed_fp32_nodes": self.fixed_fp32_nodes,
            "automatic_fp32_nodes": self.automatic_fp32_nodes,
            "fp32_count": self.fp32_count,
            "rules": self.rules,
            "worst": worst_json(self.worst),
            "trials": [trial.to_json() for trial in self.trials],
            "ranking": [entry.to_json() for entry in self.ranking],
            # Decision: no wall-clock times here: this JSON is a cached artifact, and two
            # identical runs must write identical bytes. Times go to the log.
        }


@dataclass
class PlanSplit:
    """Which nodes the search may move, and the precision of those it may not."""

    fixed_precision: dict[str, str] = field(default_factory=dict)
    searchable: list[str] = field(default_factory=list)
    automatic_fp32: list[str] = field(default_factory=list)
    constant_guarded: list[str] = field(default_factory=list)
    user_rule_nodes: list[str] = field(default_factory=list)


def search_fp32_set(
    model: onnx.ModelProto,
    decisions: Mapping[str, Decision],
    feeds: list[dict[str, np.ndarray]] | dict[str, np.ndarray],
    tolerances: Tolerances,
    *,
    max_trials: int = 64,
    low_precision: str = "fp16",
    keep_io_types: bool = True,
) -> SearchResult:
    """Search from the automatic plan `decisions` (from `plan_precision` on `model`); see the module docstring."""
    if low_precision not in LOW_PRECISIONS:
        raise UserError(f"low_precision is {low_precision!r}", f"use one of {', '.join(LOW_PRECISIONS)}")
    if max_trials < 2:
        raise UserError(f"max_trials is {max_trials}", "allow at least 2 trials (the automatic and all-low plans)")
    start = time.perf_counter()
    working = onnx.ModelProto()
    working.CopyFrom(model)
    name_nodes_as_parser_does(working)
    net = network_from_model(working)
    split = split_plan(net, decisions, low_precision)
    feeds_list = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    runner = TrialRunner(working, split.fixed_precision, split.searchable, feeds_list, tolerances,
                         low_precision, keep_io_types)
    search = _Search(runner, max_trials)
    automatic = frozenset(split.automatic_fp32)
    automatic_outcome = search.trial(automatic, "automatic plan", automatic)
    low_outcome = search.trial(frozenset(), "all low precision", automatic)
    ranking = rank_by_sensitivity(
        net, split.searchable, runner.reference_magnitudes(),
        [] if low_outcome.passed else runner.localize(frozenset()), low_precision,
    )
    starts = []
    if low_outcome.passed:
        starts.append(frozenset())
    else:
        grown = search.grow(ranking, automatic if automatic_outcome.passed else None)
        starts += [grown] if grown is not None else []
    if automatic_outcome.passed:
        starts.append(automatic)
    if starts:
        chosen = min(starts, key=len)  # the grown set wins ties: it comes first
        final = search.shrink(chosen, [entry for entry in reversed(ranking) if entry.node in chosen])
    else:
        final = automatic
    outcome = runner.cached(final)
    fp32_nodes = [name for name in split.searchable if name in final]
    rules = fp32_rules(net, fp32_nodes)
    respected = any(d.source == "authored" for d in decisions.values()) if authored_decisions(net) else None
    settings = assumed_settings(low_precision, respected)
    return SearchResult(
        passed=outcome.passed,
        fp32_nodes=fp32_nodes,
        fixed_fp32_nodes=[name for name in net.names if split.fixed_precision.get(name) == "fp32"],
        automatic_fp32_nodes=list(split.automatic_fp32),
        node_precision=runner.node_precision(final),
        decisions=_final_decisions(net, decisions, split, final, search, ranking, outcome.passed, low_precision),
        rules=rules,
        rules_yaml=rules_yaml(rules, len(fp32_nodes), settings, split.constant_guarded, split.user_rule_nodes),
        trials=search.log,
        ranking=ranking,
        worst=outcome.worst,
        seconds=time.perf_counter() - start,
    )


def split_plan(net: Network, decisions: Mapping[str, Decision], low_precision: str) -> PlanSplit:
    missing = [name for name in net.names if name not in decisions]
    if missing or len(decisions) != len(net.names):
        raise UserError(
            f"the precision decisions do not match the model's nodes ({len(missing)} node(s) without a decision)",
            "build the decisions with plan_precision on the same model",
        )
    guarded = constant_decisions(net, low_precision)
    split = PlanSplit()
    for name in net.names:
        decision = decisions[name]
        if decision.source not in SEARCHABLE_SOURCES:
            split.fixed_precision[name] = MATERIALIZE_AS[decision.precision]
            if decision.source == "rule":
                split.user_rule_nodes.append(name)
        elif name in guarded:
            split.fixed_precision[name] = "fp32"
            split.constant_guarded.append(name)
        else:
            split.searchable.append(name)
            if decision.precision == "fp32":
                split.automatic_fp32.append(name)
    return split


class _Search:
    """The trial budget, the log, and the two moves: grow and shrink."""

    def __init__(self, runner: TrialRunner, max_trials: int) -> None:
        self.runner = runner
        self.max_trials = max_trials
        self.log: list[Trial] = []
        # node -> (the trial that failed without it alone, the plan it was removed from)
        self.needed: dict[str, tuple[Trial, frozenset[str]]] = {}
        self._trial_of: dict[frozenset[str], Trial] = {}

    def trial(self, fp32: frozenset[str], step: str, base: frozenset[str]) -> Outcome | None:
        """Evaluate a plan (None when the budget is spent); cached plans cost no trial."""
        known = self.runner.cached(fp32)
        if known is not None:
            return known
        if len(self.log) >= self.max_trials:
            return None
        outcome = self.runner.evaluate(fp32)
        order = self.runner.searchable
        self.log.append(Trial(
            trial=len(self.log) + 1,
            step=step,
            fp32_count=self.runner.fp32_count(fp32),
            fp32_added=[name for name in order if name in fp32 and name not in base],
            fp32_removed=[name for name in order if name in base and name not in fp32],
            passed=outcome.passed,
            worst=outcome.worst,
            seconds=outcome.seconds,
        ))
        self._trial_of[fp32] = self.log[-1]
        trial = self.log[-1]
        # Progress on the console: a search runs for seconds to minutes (one line per trial).
        PROGRESS.info("    search trial %d/%d (%s): %d FP32 nodes, %s", trial.trial, self.max_trials, trial.step,
                      trial.fp32_count, "passes" if trial.passed else "fails")
        return outcome

    def grow(self, ranking: list[Sensitivity], ceiling: frozenset[str] | None) -> frozenset[str] | None:
        """From all-low: the suspects first, then localised origins (else the next ranked nodes) until
        a plan passes; None if none does or growing would not beat the passing plan `ceiling`."""
        ranked = [entry.node for entry in ranking]
        state: frozenset[str] = frozenset()
        wanted = {entry.node for entry in ranking if entry.suspect}
        batch = 1
        while len(state) < len(ranked):
            added = [name for name in ranked if name in wanted and name not in state]
            if not added:
                added = [name for name in ranked if name not in state][:batch]
                batch *= 2
            bigger = state | frozenset(added)
            if ceiling is not None and len(bigger) >= len(ceiling):
                return None
            outcome = self.trial(bigger, "grow", state)
            if outcome is None:
                return None
            state = bigger
            if outcome.passed:
                return state
            wanted = {o["node"] for found in self.runner.localize(state) for o in found.origins}
        return None

    def shrink(self, state: frozenset[str], order: list[Sensitivity]) -> frozenset[str]:
        """Remove what the plan does not need; `order` is least sensitive first. Nodes without direct
        evidence are removed by bisection (most of them can go), suspects one at a time (most of them
        cannot, where bisection would spend two trials per node). A node found needed before a later
        removal is tried again against the smaller plan, until every node left was needed in the final
        plan itself (or the budget is spent). Every accepted plan passed."""
        pending = [[entry.node for entry in order if not entry.suspect]]
        pending += [[entry.node] for entry in order if entry.suspect]
        while pending:
            chunk = [name for name in pending.pop(0) if name in state]
            if chunk:
                smaller = state - frozenset(chunk)
                outcome = self.trial(smaller, "shrink", state)
                if outcome is None:
                    break
                if outcome.passed:
                    state = smaller
                elif len(chunk) > 1:
                    middle = len(chunk) // 2
                    pending[:0] = [chunk[:middle], chunk[middle:]]
                else:
                    self.needed[chunk[0]] = (self._trial_of[smaller], state)
            if not pending:
                pending = [[entry.node] for entry in order
                           if entry.node in state and self.needed.get(entry.node, (None, None))[1] != state]
        return state

    def needed_in(self, final: frozenset[str], name: str) -> Trial | None:
        """The trial that failed without `name` alone, when it was run against `final` itself."""
        trial, tested_against = self.needed.get(name, (None, None))
        return trial if tested_against == final else None


def _final_decisions(net, decisions, split: PlanSplit, final, search: _Search, ranking, passed, low) -> dict:
    rank = {entry.node: index + 1 for index, entry in enumerate(ranking)}
    result = {}
    for name in net.names:
        original = decisions[name]
        if name in split.constant_guarded and original.precision != "fp32":
            result[name] = Decision("fp32", "constants guard (precision.auto.constants=keep_fp32, which the "
                                    "search assumes)", "auto", original.observed_max_abs)
        elif name not in split.searchable:
            result[name] = original
        elif not passed:
            result[name] = original
        elif name in final:
            failed = search.needed_in(final, name)
            why = (f"trial {failed.trial} without it alone failed ({_worst_text(failed.worst)})" if failed
                   else "not confirmed alone against the final plan: max_trials reached")
            result[name] = Decision("fp32", f"accuracy search: kept FP32, {why}; sensitivity rank {rank[name]}",
                                    "search", original.observed_max_abs)
        else:
            result[name] = Decision(low, f"accuracy search: {low} passes validation", "search",
                                    original.observed_max_abs)
    return result


def _worst_text(worst: dict | None) -> str:
    if not worst:
        return "no bound set"
    if worst["metric"] == "nonfinite":
        return f"{worst['output']}: {int(worst['value'])} non-finite values"
    return f"{worst['output']}: {worst['metric']} {worst['value']:.6g} vs bound {worst['bound']:g}"
