"""The search's trial log and its one move: release FP32 nodes to low precision, chunk by chunk.

`SearchSteps.trial` evaluates a plan (cached plans cost no trial) and logs it
with its FLOP share; `SearchSteps.release` tries to move a chunk of FP32 nodes
to low precision, keeps the move when the plan passes, and otherwise splits the
chunk in two and tries each half, down to single nodes, which are then known
to be needed (given the rest of the plan at that moment). For a single cheap
node, a move that passes but costs more memory traffic (pareto.memory_cost) is
refused too. `until` bounds the
trial count of one phase so a later phase keeps some budget.
"""

from __future__ import annotations

import logging
import time

from trtpipe.search.pareto import FlopShare, memory_cost
from trtpipe.search.trials import Outcome, Trial, TrialRunner

PROGRESS = logging.getLogger("trtpipe")  # the pipeline logger: its INFO lines reach the console


class SearchSteps:
    def __init__(self, runner: TrialRunner, max_trials: int, share: FlopShare, *, deadline: float | None = None,
                 label: str = "search") -> None:
        self.runner = runner
        self.max_trials = max_trials
        self.share = share
        self.deadline = deadline
        self.label = label
        self.out_of_time = False  # a trial was refused because `deadline` had passed
        self.log: list[Trial] = []
        # node -> (the trial that failed without it alone, the plan it was removed from)
        self.needed: dict[str, tuple[Trial, frozenset[str]]] = {}
        self.trial_of: dict[frozenset[str], Trial] = {}

    @property
    def spent(self) -> int:
        return len(self.log)

    def trial(self, fp32: frozenset[str], step: str, base: frozenset[str], until: int | None = None) -> Outcome | None:
        """Evaluate a plan (None when the budget, or `until`, is spent); cached plans cost no trial."""
        known = self.runner.cached(fp32)
        if known is not None:
            return known
        if len(self.log) >= min(self.max_trials, until or self.max_trials):
            return None
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.out_of_time = True
            return None
        outcome = self.runner.evaluate(fp32)
        order = self.runner.searchable
        trial = Trial(
            trial=len(self.log) + 1,
            step=step,
            fp32_count=self.runner.fp32_count(fp32),
            fp32_added=[name for name in order if name in fp32 and name not in base],
            fp32_removed=[name for name in order if name in base and name not in fp32],
            passed=outcome.passed,
            worst=outcome.worst,
            seconds=outcome.seconds,
            low_precision_flop_share=self.share.share(fp32),
            errors=dict(outcome.errors),
            casts=outcome.casts,
        )
        self.log.append(trial)
        self.trial_of[fp32] = trial
        # Progress on the console: a search runs for seconds to minutes (one line per trial).
        PROGRESS.info("    %s trial %d/%d (%s): %d FP32 nodes, %.1f%% FLOPs low precision, %s", self.label,
                      trial.trial, self.max_trials, step, trial.fp32_count, 100 * trial.low_precision_flop_share,
                      "passes" if trial.passed else "fails")
        return outcome

    def release(self, state: frozenset[str], chunks: list[list[str]], step: str, until: int,
                split_by_flops: bool = False, no_more_casts: bool = False) -> tuple[frozenset[str], bool]:
        """Move `chunks` of FP32 nodes to low precision in order (see the module docstring).
        `no_more_casts`: a single node whose move passes but raises the plan's `memory_cost` (it needs
        two or more extra Casts) is refused like a failing one (for cheap nodes, whose only cost is
        memory traffic; a chunk is kept when it passes: it frees many nodes, and the Casts it adds
        go with later chunks).
        Returns the final state and whether any move was kept (then the state is a passing plan)."""
        pending = [list(chunk) for chunk in chunks if chunk]
        moved = False
        while pending:
            chunk = [name for name in pending.pop(0) if name in state]
            if not chunk:
                continue
            smaller = state - frozenset(chunk)
            outcome = self.trial(smaller, step, state, until)
            if outcome is None:
                break
            current = self.trial_of.get(state)
            costlier = (no_more_casts and len(chunk) == 1 and current is not None
                        and memory_cost(self.trial_of[smaller]) > memory_cost(current))
            if outcome.passed and not costlier:
                state, moved = smaller, True
            elif len(chunk) > 1:
                middle = self._middle(chunk) if split_by_flops else len(chunk) // 2
                pending[:0] = [chunk[:middle], chunk[middle:]]
            else:
                self.needed[chunk[0]] = (self.trial_of[smaller], state)
        return state, moved

    def confirm(self, state: frozenset[str], order: list[str], step: str) -> frozenset[str]:
        """Try once more, one at a time, the nodes of `order` that were found needed against a larger
        plan than `state` (a later move may have made them unnecessary), until every node tried was
        needed against the final plan itself or the budget is spent."""
        while True:
            stale = [[name] for name in order if name in state and self.needed.get(name, (None, None))[1] != state]
            if not stale or self.spent >= self.max_trials or self.out_of_time:
                return state
            state, _ = self.release(state, stale, step, self.max_trials, no_more_casts=True)

    def needed_in(self, final: frozenset[str], name: str) -> Trial | None:
        """The trial that failed without `name` alone, when it was run against `final` itself."""
        trial, tested_against = self.needed.get(name, (None, None))
        return trial if tested_against == final else None

    def _middle(self, chunk: list[str]) -> int:
        """Split point giving the first part about half the chunk's FLOPs (at least one node each)."""
        total, running = sum(self.share.flops(n) for n in chunk), 0
        for index, name in enumerate(chunk[:-1]):
            running += self.share.flops(name)
            if running * 2 >= total:
                return index + 1
        return max(1, len(chunk) // 2)
