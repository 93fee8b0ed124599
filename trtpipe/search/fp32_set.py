"""Accuracy-driven precision search: the most low-precision compute that still passes validation.

The automatic rules keep FP32 whatever *might* overflow (whole normalization
groups, every node above `precision.auto.max_abs`, big MatMuls included); the
search asks the emulator what the sample inputs actually need. A trial is one
plan: materialise it, run it on the faithful FP16 emulator, judge it against the
FP32 reference with the validate stage's tolerances (`trtpipe.search.trials`;
the reference run is made once and reused by every trial and localisation,
and the emulated graph is built once, its rounding points switched per plan:
`trtpipe.search.switched`).

Objective: maximise the low-precision share of the heavy FLOPs (MatMul, Gemm,
Conv: `pareto.FlopShare`) under the tolerance; among plans with the same share,
fewer FP32 nodes. Cheap nodes (elementwise, norms, Softmax) cost no FLOPs to
keep FP32, only Casts; a heavy node kept FP32 costs its FLOPs. So the search
decides the heavy nodes first, with every cheap node FP32 (the most accurate
setting for a given heavy set, leaving the heavy nodes all the error budget),
then gives back to low precision the cheap nodes the plan does not need.

Algorithm (every step deterministic: orders are FLOPs, ranks, topological order):
1. Baselines: the automatic plan, then the all-low-precision plan (if it
   passes, it is the answer: 100% of the searched FLOPs).
2. One localisation of the all-low plan ranks the searchable nodes by
   sensitivity (`trtpipe.search.sensitivity`); heavy nodes whose values leave
   the low-precision range (overflow, inf/NaN) are kept FP32 from the start.
3. Heavy phase: from "every searched node FP32", release the heavy nodes to low
   precision by binary splitting, largest FLOPs first (ties: topological
   order): try the whole chunk; if the plan passes keep it, else split the
   chunk in two halves of equal FLOPs and try each. The first chunk is the
   heavy nodes the automatic plan already runs in low precision (with every
   cheap node FP32 that plan keeps the automatic FLOP share at most the
   automatic plan's error from heavy nodes, so one trial usually secures it),
   then the heavy nodes it keeps FP32; a node that fails alone
   stays FP32. The overflowing heavy nodes are tried alone last. The phase
   leaves `max_trials // 5` trials to the next one. When no heavy node could
   go (or the model has none), "every searched node FP32" is tried so the
   cheap phase starts from a plan known to pass.
4. Cheap phase: release the cheap FP32 nodes, in chunks in topological order
   (a released chunk is a contiguous stretch, which joins low-precision
   regions and removes Casts rather than adding them): first those neither
   sensitive nor automatic-FP32, then the other non-suspects, then the
   suspects one by one. A single node whose release passes but raises the
   memory cost (Casts + FP32 nodes, `pareto.memory_cost`) stays FP32 (cut
   out of an FP32 island, it costs two Casts and saves no FLOPs).
5. Confirm: nodes found needed against a larger plan are tried again against
   the final one while the budget lasts.
The answer is the passing trial with the highest FLOP share (the lowest
Casts + FP32 nodes on a tie, `pareto.chosen_trial`); `search.json` records every trial
(FP32 count, FLOP share, worst value per metric, passed), the Pareto front of
FLOP share against error, and the chosen plan with the reason.

Decision: ties among heavy nodes go by topological order, not by the
sensitivity ranking. Binary splitting needs the nodes that must stay FP32 to
sit together in the order; neighbouring layers err alike, so topological
order groups them (and what stays FP32 forms contiguous runs: fewer Casts).
The all-low ranking is noise for heavy nodes (everything after the first
collapsed norm is wrong), and so is the error each node adds under the
"heavy low, cheap FP32" plan: measured on the built-in t5 at max_rel 5e-4,
topological order reached 83% FLOPs low precision, the ranking 62% (least
sensitive first) or 86% (most sensitive first), the added error 76% / 86%;
at 7e-4 all reached 98.8-99.4%.

Why not grow from all-low by sensitivity (the first version): localisation
names where error *enters*, which on a transformer is the big MatMuls as often
as the norms; growing by node count then keeps most MatMuls FP32 (measured:
24% FLOPs low precision after 64 trials on a T5-style encoder).

What the search never moves: nodes decided by user rules, kept as authored,
structure (`none`, Casts), and the consumers of constants that do not fit the
low-precision type (the constants guard, `precision.auto.constants=keep_fp32`:
those constants are broken in FP16 for every input, not just the samples).

Decisions:
- The result is a plan that passed, so its validation passes by construction;
  with `max_trials` exhausted it is still a passing plan, just possibly not
  the best (said in the affected nodes' reasons).
- If no plan passes (the tolerance is out of reach by precision alone),
  `passed` is false and the plan is the automatic one: the search never
  hands back a plan it saw fail as if it were an answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from trtpipe.errors import UserError
from trtpipe.precision.network.authored import authored_decisions
from trtpipe.precision.auto.auto_constants import constant_decisions
from trtpipe.precision.network.decisions import Decision, LOW_PRECISIONS, MATERIALIZE_AS
from trtpipe.precision.network.network import Network, name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.plan_document import computes_low
from trtpipe.search.moves import PROGRESS, SearchSteps
from trtpipe.search.pareto import FlopShare, chosen_json, chosen_trial, front_json, pareto_front
from trtpipe.search.rules_yaml import assumed_settings, fp32_rules, rules_yaml
from trtpipe.search.sensitivity import Sensitivity, rank_by_sensitivity
from trtpipe.search.trials import Trial, TrialRunner, worst_json, worst_text
from trtpipe.validate.compare import Tolerances

SEARCHABLE_SOURCES = ("default", "auto", "search")
DEFAULT_MAX_TRIALS = 30
SEARCH_FORMAT = 2  # 2: FLOP share and errors per trial, Pareto front, chosen plan


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
    low_precision_flop_share: float = 0.0  # of the final plan
    pareto: list[Trial] = field(default_factory=list)
    chosen: dict = field(default_factory=dict)  # {trial, low_precision_flop_share, fp32_count, error_ratio, why}
    emulation: dict = field(default_factory=dict)  # trials on the switched / full emulation, why not switched

    @property
    def fp32_count(self) -> int:
        return len(self.fp32_nodes) + len(self.fixed_fp32_nodes)

    def to_json(self) -> dict:
        return {
            "format": SEARCH_FORMAT,
            "passed": self.passed,
            "low_precision_flop_share": round(self.low_precision_flop_share, 6),
            "chosen": self.chosen,
            "emulation": self.emulation,
            "pareto_front": front_json(self.pareto),
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
    fixed_low: list[str] = field(default_factory=list)  # fixed nodes that compute in low precision


def search_fp32_set(
    model: onnx.ModelProto,
    decisions: Mapping[str, Decision],
    feeds: list[dict[str, np.ndarray]] | dict[str, np.ndarray],
    tolerances: Tolerances,
    *,
    max_trials: int = DEFAULT_MAX_TRIALS,
    low_precision: str = "fp16",
    keep_io_types: bool = True,
    switched: bool = True,
    float_model: Path | None = None,
) -> SearchResult:
    """Search from the automatic plan `decisions` (from `plan_precision` on `model`); see the module docstring.
    `switched=False` evaluates every trial on its own emulated graph (trials.py)."""
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
                         low_precision, keep_io_types, switched, float_model=float_model)
    share = FlopShare(net, split.searchable, split.fixed_low)
    steps = SearchSteps(runner, max_trials, share)
    automatic = frozenset(split.automatic_fp32)
    steps.trial(automatic, "automatic plan", automatic)
    low_outcome = steps.trial(frozenset(), "all low precision", automatic)
    ranking = rank_by_sensitivity(
        net, split.searchable, runner.reference_magnitudes(),
        [] if low_outcome.passed else runner.localize(frozenset()), low_precision,
    )
    if not low_outcome.passed:
        _heavy_then_cheap(steps, split, ranking, share, max_trials)
    chosen = chosen_trial(steps.log)
    final = _plan_of(steps, chosen) if chosen is not None else automatic
    outcome = runner.evaluate(final)  # cached: every chosen plan was a trial
    if runner.emulations["switched"] and runner.evaluate_in_full(final).passed != outcome.passed:
        # Decision: the switched emulation is tested bit for bit against the full one; should a model
        # ever make them disagree, the search is run again the slow way rather than trusted.
        PROGRESS.warning("precision search: the switched emulation disagrees with the full one on the chosen "
                         "plan; searching again with one emulated graph per trial")
        return search_fp32_set(model, decisions, feeds, tolerances, max_trials=max_trials,
                               low_precision=low_precision, keep_io_types=keep_io_types, switched=False,
                               float_model=float_model)
    fp32_nodes = [name for name in split.searchable if name in final]
    rules = fp32_rules(net, fp32_nodes)
    respected = any(d.source == "authored" for d in decisions.values()) if authored_decisions(net) else None
    settings = assumed_settings(low_precision, respected)
    automatic_trial = steps.log[0]
    return SearchResult(
        passed=chosen is not None,
        fp32_nodes=fp32_nodes,
        fixed_fp32_nodes=[name for name in net.names if split.fixed_precision.get(name) == "fp32"],
        automatic_fp32_nodes=list(split.automatic_fp32),
        node_precision=runner.node_precision(final),
        decisions=_final_decisions(net, decisions, split, final, steps, share, chosen is not None, low_precision,
                                   {e.node for e in ranking if e.overflow or e.nonfinite}),
        rules=rules,
        rules_yaml=rules_yaml(rules, len(fp32_nodes), settings, split.constant_guarded, split.user_rule_nodes),
        trials=steps.log,
        ranking=ranking,
        worst=outcome.worst,
        seconds=time.perf_counter() - start,
        low_precision_flop_share=share.share(final),
        pareto=pareto_front(steps.log),
        chosen=chosen_json(chosen, automatic_trial, _why(chosen, automatic_trial, steps)),
        emulation={**runner.emulations, "not_switched": runner.not_switched},
    )


def _heavy_then_cheap(steps: SearchSteps, split: PlanSplit, ranking: list[Sensitivity], share: FlopShare,
                      max_trials: int) -> None:
    """Steps 3-5 of the module docstring."""
    rank = {entry.node: index for index, entry in enumerate(ranking)}
    sensitive = {e.node for e in ranking if e.suspect or e.normalization or e.failed}
    out_of_range = {e.node for e in ranking if e.overflow or e.nonfinite}
    automatic = set(split.automatic_fp32)
    heavy = [name for name in split.searchable if share.heavy(name)]
    # A heavy node the automatic plan runs in low precision has its reference values in range (the
    # range rule checked them); inf/NaN in the all-low plan only says an earlier node broke.
    overflowing = {e.node for e in ranking if e.overflow}
    out_of_range -= {n for n in heavy if n not in automatic and n not in overflowing}
    cheap = [name for name in split.searchable if not share.heavy(name)]
    topological = {name: index for index, name in enumerate(split.searchable)}
    by_flops = lambda n: (-share.flops(n), topological[n])  # noqa: E731
    # The automatic plan's low-precision heavy nodes go first, as one chunk: when the automatic plan
    # fails only slightly (its cheap nodes' error), the same heavy set with every cheap node FP32 keeps
    # its whole FLOP share in one trial; the heavy nodes it keeps FP32 are tried after.
    releasable = [n for n in heavy if n not in out_of_range]
    first_heavy = sorted((n for n in releasable if n not in automatic), key=by_flops)
    rest_heavy = sorted((n for n in releasable if n in automatic), key=by_flops)
    chunks = [chunk for chunk in (first_heavy, rest_heavy) if chunk] + [[name] for name in heavy if name in out_of_range]
    everything = frozenset(split.searchable)
    reserve = max_trials // 5 if cheap else 0
    state, moved = steps.release(everything, chunks, "heavy", max_trials - reserve, split_by_flops=True)
    if not moved:  # no heavy node, or none could go: the cheap phase needs a passing plan to start from
        outcome = steps.trial(everything, "all searched FP32", frozenset(split.automatic_fp32))
        if outcome is None or not outcome.passed:
            return  # the tolerance is out of reach (or the budget spent): the automatic plan may still pass
    first = [n for n in cheap if n not in sensitive and n not in automatic]
    second = [n for n in cheap if n not in first and not _suspect(ranking, rank, n)]
    singles = [[n] for n in cheap if _suspect(ranking, rank, n)]
    state, _ = steps.release(state, [first, second, *singles], "cheap", max_trials, no_more_casts=True)
    steps.confirm(state, [n for n in split.searchable if n in state], "confirm")


def _suspect(ranking: list[Sensitivity], rank: dict[str, int], name: str) -> bool:
    return ranking[rank[name]].suspect


def _plan_of(steps: SearchSteps, trial: Trial) -> frozenset[str]:
    return next(plan for plan, logged in steps.trial_of.items() if logged is trial)


def _why(chosen: Trial | None, automatic: Trial, steps: SearchSteps) -> str:
    if chosen is None:
        return (f"no plan passed in {len(steps.log)} trials, not even the automatic one: the tolerance is out of "
                "reach by precision alone; the automatic plan is kept")
    text = (f"the passing trial with the highest low-precision FLOP share ({chosen.low_precision_flop_share:.1%}, "
            f"automatic plan {automatic.low_precision_flop_share:.1%}"
            f"{'' if automatic.passed else ', which fails'}); among equal shares the fewest Casts + FP32 "
            f"nodes ({chosen.casts} + {chosen.fp32_count})")
    if len(steps.log) >= steps.max_trials:
        text += f"; max_trials ({steps.max_trials}) reached"
    return text


def split_plan(net: Network, decisions: Mapping[str, Decision], low_precision: str,
               guard_constants: bool = True) -> PlanSplit:
    """`guard_constants`: the search keeps the consumers of constants that do not fit the low-precision
    type FP32 whatever the automatic plan says; the repair (repair.py) starts from the automatic plan
    exactly as decided, so it passes False."""
    missing = [name for name in net.names if name not in decisions]
    if missing or len(decisions) != len(net.names):
        raise UserError(
            f"the precision decisions do not match the model's nodes ({len(missing)} node(s) without a decision)",
            "build the decisions with plan_precision on the same model",
        )
    guarded = constant_decisions(net, low_precision) if guard_constants else {}
    split = PlanSplit()
    for name in net.names:
        decision = decisions[name]
        if decision.source not in SEARCHABLE_SOURCES:
            split.fixed_precision[name] = MATERIALIZE_AS[decision.precision]
            if decision.source == "rule":
                split.user_rule_nodes.append(name)
            if computes_low(net, decision, name):
                split.fixed_low.append(name)
        elif name in guarded:
            split.fixed_precision[name] = "fp32"
            split.constant_guarded.append(name)
        else:
            split.searchable.append(name)
            if decision.precision == "fp32":
                split.automatic_fp32.append(name)
    return split


def _final_decisions(net, decisions, split: PlanSplit, final, steps: SearchSteps, share: FlopShare, passed,
                     low, out_of_range: set[str]) -> dict:
    result = {}
    for name in net.names:
        original = decisions[name]
        if name in split.constant_guarded and original.precision != "fp32":
            result[name] = Decision("fp32", "constants guard (precision.auto.constants=keep_fp32, which the "
                                    "search assumes)", "auto", original.observed_max_abs)
        elif name not in split.searchable or not passed:
            result[name] = original
        elif name in final:
            failed = steps.needed_in(final, name)
            kind = (f"{share.flops(name):,} FLOPs" if share.heavy(name) else "no heavy FLOPs: costs only Casts")
            if failed is None:
                why = f"not tried alone against the final plan: max_trials ({steps.max_trials}) reached"
                if name in out_of_range:
                    why = f"its values leave the {low} range in the FP32 reference ({why})"
            elif failed.passed:
                why = (f"trial {failed.trial} moving it to {low} alone passed but needed {failed.casts} Casts "
                       "(more memory traffic than it saves)")
            else:
                why = f"trial {failed.trial} moving it to {low} alone failed ({worst_text(failed.worst)})"
            result[name] = Decision("fp32", f"accuracy search: kept FP32 ({kind}), {why}", "search",
                                    original.observed_max_abs)
        else:
            result[name] = Decision(low, f"accuracy search: {low} passes validation", "search",
                                    original.observed_max_abs)
    return result

