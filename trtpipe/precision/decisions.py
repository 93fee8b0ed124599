"""A node's precision decision and its reason: the unit the plan is made of."""

from __future__ import annotations

from dataclasses import dataclass

# Precisions a node can be planned in. `keep`: left exactly as authored (Casts, author
# islands); `none`: the node produces no float tensor (integer/shape path).
LOW_PRECISIONS = ("fp16", "bf16")

# Largest finite value and smallest positive subnormal of each low-precision type.
FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 2.0**-24


@dataclass
class Decision:
    precision: str
    reason: str
    source: str = "default"  # default, auto, rule, authored, structure
    observed_max_abs: float | None = None
