"""Rank the searchable nodes by how likely low precision breaks them: the search's order.

Evidence, strongest first (the sort key, compared in this order):
1. `origin`: localisation of the all-low-precision plan says error *enters* the
   graph at this node (it fails while none of its inputs do);
2. `nonfinite`: its low-precision output holds inf/NaN where the reference is finite;
3. `overflow`: the FP32 reference holds values beyond the largest
   low-precision value in its output or in an activation it reads (read in low
   precision, that input passes through a Cast that makes it inf). Constants
   do not count (the constants guard handles them), nor do hidden
   intermediates such as a fused LayerNormalization's variance, which is
   computed in FP32 inside the op (TensorRT and the emulator alike);
4. `failed`: its output is more than the localisation threshold off;
5. `normalization`: it belongs to a normalization group or a Softmax
   (DESIGN.md's known-sensitive computations);
6. the relative error itself, then the output magnitude.
Ties keep topological order, so the ranking is deterministic. `suspect`
(origin, inf/NaN or overflow) marks the nodes with direct evidence: the
search releases suspect cheap nodes one by one, last; heavy nodes whose values
leave the low-precision range (overflow, inf/NaN) start FP32 and are tried
alone last.

Decision: the ranking is only an order. What is kept FP32 is decided by
trials (fp32_set.py), so a wrong guess here costs trials, not accuracy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trtpipe.precision.network.network import Network
from trtpipe.precision.auto.norm_groups import normalization_groups
from trtpipe.validate.localize import LARGEST_VALUE, Localization
from trtpipe.numerics.metrics import json_float


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
    output_max_abs: float
    input_max_abs: float

    @property
    def suspect(self) -> bool:
        return self.origin or self.nonfinite or self.overflow

    def key(self) -> tuple:
        return (self.origin, self.nonfinite, self.overflow, self.failed, self.normalization,
                self.relative_error, self.output_max_abs)

    def to_json(self) -> dict:
        entry = {key: json_float(value) if isinstance(value, float) else value for key, value in asdict(self).items()}
        entry["suspect"] = self.suspect
        return entry


def rank_by_sensitivity(
    net: Network,
    searchable: list[str],
    magnitudes: dict[str, float],
    localizations: list[Localization],
    low_precision: str,
) -> list[Sensitivity]:
    """Every searchable node, most sensitive first; `magnitudes` maps tensor names to reference max |x|."""
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
    ranked = []
    for name in searchable:
        node = net.nodes[name]
        activations = [t for t in node.input if t and t not in net.constants]
        output_max_abs = max((magnitudes.get(t, 0.0) for t in node.output if t), default=0.0)
        input_max_abs = max((magnitudes.get(t, 0.0) for t in activations), default=0.0)
        ranked.append(Sensitivity(
            node=name,
            op_type=node.op_type,
            origin=name in origins,
            nonfinite=name in nonfinite,
            overflow=bool(activations) and max(output_max_abs, input_max_abs) > limit,
            failed=name in failed,
            normalization=name in grouped,
            relative_error=relative.get(name, 0.0),
            output_max_abs=output_max_abs,
            input_max_abs=input_max_abs,
        ))
    position = {name: index for index, name in enumerate(searchable)}
    return sorted(ranked, key=lambda s: (tuple(-float(v) for v in s.key()), position[s.node]))
