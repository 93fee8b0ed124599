"""A node's precision decision and its reason: the unit the plan is made of."""

from __future__ import annotations

from dataclasses import dataclass

# Precisions a node can be planned in. `keep`: left exactly as authored (Casts, author
# islands); `none`: the node produces no float tensor (integer/shape path).
LOW_PRECISIONS = ("fp16", "bf16")

# Largest finite value and smallest positive subnormal of each low-precision type.
FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 2.0**-24
FP16_MIN_NORMAL = 2.0**-14  # below it, FP16 keeps a fixed absolute step of 2^-24 (subnormals)


# How a plan precision is handed to the materialiser: `none` (no float output) and
# `keep` (authored) both mean "leave the node's types as they are".
# `mixed`: a control-flow node whose body mixes precisions (control_flow.py); its own types stay.
MATERIALIZE_AS = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "keep": "keep", "none": "keep", "mixed": "keep"}


@dataclass
class Decision:
    precision: str
    reason: str
    source: str = "default"  # default, auto, rule, authored, structure, search
    observed_max_abs: float | None = None
