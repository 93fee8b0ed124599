"""Rank the searchable nodes by how likely low precision breaks them: the search's order.

Evidence, strongest first (the sort key, compared in this order):
1. `origin`: localisation of the all-low-precision plan says error *enters* the
   graph at this node (it fails while none of its inputs do);
2. `nonfinite`: its low-precision output holds inf/NaN where the reference is finite;
3. `overflow`: the FP32 reference's magnitude there (including hidden
   intermediates such as a fused LayerNorm's variance) exceeds the largest
   low-precision value;
4. `failed`: its output is more than the localisation threshold off;
5. `normalization`: it belongs to a normalization group or a Softmax
   (DESIGN.md's known-sensitive computations);
6. the relative error itself, then the magnitude.
Ties keep topological order, so the ranking is deterministic.

Decision: the ranking is only an order. What is kept FP32 is decided by
trials (search.py), so a wrong guess here costs trials, not accuracy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trtpipe.precision.network import Network
from trtpipe.precision.norm_groups import normalization_groups
from trtpipe.validate.localize import LARGEST_VALUE, Localization
from trtpipe.validate.metrics import json_float


@dataclass
class Sensitivity:
    node: str
    op_type: str
    origin: bool
    nonfinite: bool
    overflow: bool
    failed: bool
    normalization: bool
    relative_error: float
    magnitude: float

    def key(self) -> tuple:
        return (self.origin, self.nonfinite, self.overflow, self.failed, self.normalization,
                self.relative_error, self.magnitude)

    def to_json(self) -> dict:
        return {key: json_float(value) if isinstance(value, float) else value for key, value in asdict(self).items()}


def rank_by_sensitivity(
    net: Network,
    searchable: list[str],
    observed: dict[str, float],
    localizations: list[Localization],
    low_precision: str,
) -> list[Sensitivity]:
    """Every searchable node, most sensitive first."""
    origins = {origin["node"] for found in localizations for origin in found.origins}
    relative: dict[str, float] = {}
    nonfinite: set[str] = set()
    failed: set[str] = set()
    for found in localizations:
        for entry in found.tensors:
            relative[entry.node] = max(relative.get(entry.node, 0.0), entry.relative_error)
            if entry.cand_nonfinite:
                nonfinite.add(entry.node)
            if entry.failed:
                failed.add(entry.node)
    grouped = normalization_groups(net, norms=True, softmax=True)
    limit = LARGEST_VALUE.get(low_precision, float("inf"))
    ranked = [
        Sensitivity(
            node=name,
            op_type=net.op_type(name),
            origin=name in origins,
            nonfinite=name in nonfinite,
            overflow=observed.get(name, 0.0) > limit,
            failed=name in failed,
            normalization=name in grouped,
            relative_error=relative.get(name, 0.0),
            magnitude=observed.get(name, 0.0),
        )
        for name in searchable
    ]
    position = {name: index for index, name in enumerate(searchable)}
    return sorted(ranked, key=lambda s: (tuple(-float(v) for v in s.key()), position[s.node]))
