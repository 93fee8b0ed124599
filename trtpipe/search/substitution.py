"""The repair's substitution: a heavy node a passing plan still needs, swapped for a cheaper heavy
node that does its job (`substitute_stand_ins`, step 4 of `repair.py`).

Why: releasing only asks whether a node can go; it never asks whether a cheaper one could do its
job. An FP16 error that breaks a bound by a little is often the sum of many small ones, and FP32
in any of several places brings it back under; the grown region hands the shrink whichever of
them lay within its radius. On issue 30's T5 (seed 3) that was the block-1 `wi_0` MatMul (5.9% of
the FLOPs); the block's `q` projection (1.5%) passes as well, and the plan goes from 88.2% to
92.6% FLOPs low precision.

Decisions:
- Candidates in order of edges from the node they would replace (either direction; ties: fewer
  FLOPs, then topological order): a stand-in works on the same signal, and nearness is the one
  order that needs no extra trial. Only nodes with fewer FLOPs are tried, so every kept swap
  lowers the FLOPs in FP32 and the phase cannot cycle.
- A stand-in is judged with every cheap node FP32 (the search's rule, `fp32_set.py`: heavy nodes
  are decided in the most accurate setting for a given heavy set; cheap nodes cost no FLOPs,
  only Casts, and go back afterwards). Judged against the shrunk plan's cheap nodes instead, a
  stand-in that works can fail by a hair: on issue 30's T5 seed 2 the block-0 `v` projection
  (1.5% of the FLOPs, standing in for the block-0 `wi_0`, 5.9%) fails against the grown region's
  cheap nodes (cosine ratio 1.2 of the bound) and passes with every cheap node FP32 (0.95): the
  plan goes from 87.5% to 91.9% FLOPs low precision, where no single stand-in passed before
  (measured: of the 2,800 sets of attention MatMuls within the 90% floor, with every cheap node
  FP32, only those holding block-0 `v` with `k` or with the score MatMul pass).
- When a stand-in passes that way, one more trial asks whether it passes against the plan's own
  cheap nodes (the swap alone): if so that plan is kept, and the cheap nodes the stand-in did not
  need cost no release trials (basic-pitch: its 1D Conv's neighbour stands in alone). Otherwise the
  plan with every cheap node FP32 is kept and the cheap release gives back what it can: FLOPs are
  the objective, Casts the tie-break (seed 3: the block-1 `q` projection stands in for the `wi_0`
  MatMul, 92.6% FLOPs low precision as before, but the swap alone fails and the plan keeps more
  cheap nodes FP32 than the single stand-in `v` it found before against the shrunk plan).
- At most `SUBSTITUTION_TRIALS` trials in all, needed heavy nodes together, largest first: on a
  model whose trial takes seconds the phase is a bet, so its stake is fixed (per node, U^2-Netp's
  two needed Convs cost 16 trials and found none). The repair runs it before the cheap release
  so that the cheap release cannot starve it (seed 2 spent its 40 trials before it otherwise).
"""

from __future__ import annotations

from trtpipe.precision.network.network import Network
from trtpipe.search.moves import SearchSteps
from trtpipe.search.pareto import FlopShare

# Trials of the substitution, all needed heavy nodes together. Issue 30's T5: the first passing
# stand-in of the needed `wi_0` MatMul was the 4th nearest (seed 3) and the 5th (seed 2), each
# with one trial more for the swap alone.
SUBSTITUTION_TRIALS = 8


def substitute_stand_ins(steps: SearchSteps, net: Network, searchable: list[str], share: FlopShare,
                         state: frozenset[str], needed: list[str]) -> tuple[frozenset[str], list[str]]:
    """Each heavy node in `needed` (held FP32 by the passing plan `state`), largest first: try it in
    low precision with one cheaper heavy node FP32 instead, nearest first, every cheap node FP32;
    keep the first swap that passes (see the module docstring). Returns the plan and its heavy
    nodes of `needed`, stand-ins in place of the nodes they replaced."""
    topological = {name: index for index, name in enumerate(searchable)}
    every_cheap = frozenset(name for name in searchable if not share.heavy(name))
    kept = list(needed)
    until = steps.spent + SUBSTITUTION_TRIALS
    for node in sorted(needed, key=lambda n: (-share.flops(n), topological[n])):
        distance = distances(net, node)
        candidates = sorted((c for c in set(searchable) - state
                             if share.heavy(c) and share.flops(c) < share.flops(node) and c in distance),
                            key=lambda c: (distance[c], share.flops(c), topological[c]))
        for candidate in candidates:
            swapped = (state - {node}) | {candidate}
            outcome = steps.trial(swapped | every_cheap, f"substitute {candidate} for {node}, every cheap node FP32",
                                  state, until)
            if outcome is None:
                return state, kept
            if not outcome.passed:
                continue
            alone = steps.trial(swapped, f"substitute {candidate} for {node}", state, until)
            state = swapped if alone is not None and alone.passed else swapped | every_cheap
            kept = [candidate if n == node else n for n in kept]
            break
    return state, kept


def distances(net: Network, start: str) -> dict[str, int]:
    """Edges from `start` to every node connected to it, either direction (breadth first)."""
    distance, frontier = {start: 0}, [start]
    while frontier:
        following = []
        for name in frontier:
            for other in net.neighbours(name):
                if other not in distance:
                    distance[other] = distance[name] + 1
                    following.append(other)
        frontier = following
    return distance
