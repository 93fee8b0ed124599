"""Automatic rule: constants that do not fit the low-precision type.

An initializer or Constant with values beyond ±65504 becomes ±inf in FP16 (the
Hugging Face attention mask, -3.4e38, turns outputs into NaN that way); values
below FP16's smallest subnormal flush to zero (an epsilon of 1e-12 becomes 0 and
a division by zero follows). Their real consumers stay FP32 (`keep_fp32`), or the
values are clipped by the materialiser (`saturate`), or nothing is done (`off`).

Decision: a tensor "flushes" when it is small (≤ 16 values, i.e. a scalar such as
an epsilon) and any of its non-zero values flush, or when more than 1% of its
non-zero values flush: a few tiny weights in a big matrix flushing is normal and
harmless; an epsilon flushing is not.
"""

from __future__ import annotations

import numpy as np

from trtpipe.graph.weights_on_disk import tensor_array
from trtpipe.precision.decisions import FP16_MAX, FP16_MIN_SUBNORMAL
from trtpipe.precision.network import FLOAT_TYPES, Network
from trtpipe.precision.passthrough import real_consumers

_SMALL_TENSOR = 16
_FLUSH_SHARE = 0.01


def constant_problems(net: Network, low_precision: str) -> dict[str, tuple[str, float]]:
    """tensor name -> (problem, magnitude) for constants that do not fit FP16 (BF16 has FP32's range)."""
    if low_precision != "fp16":
        return {}
    problems = {}
    for name, tensor in net.constants.items():
        if tensor.data_type not in FLOAT_TYPES or not real_consumers(net, name):
            continue
        values = np.abs(tensor_array(tensor).astype(np.float64, copy=False)).ravel()
        if values.size == 0:
            continue
        largest = float(values.max())
        if largest > FP16_MAX:
            problems[name] = ("exceeds", largest)
            continue
        nonzero = values[values > 0]
        flushing = nonzero[nonzero < FP16_MIN_SUBNORMAL / 2]
        if flushing.size and (values.size <= _SMALL_TENSOR or flushing.size > _FLUSH_SHARE * nonzero.size):
            problems[name] = ("flushes", float(flushing.min()))
    return problems


def constant_decisions(net: Network, low_precision: str) -> dict[str, tuple[str, float]]:
    """node -> (reason, magnitude): the real consumers of problem constants."""
    decisions: dict[str, tuple[str, float]] = {}
    for name, (problem, magnitude) in constant_problems(net, low_precision).items():
        if problem == "exceeds":
            reason = f"constant {name} has |value| {magnitude:.3g} > {FP16_MAX:g} (would become inf in fp16)"
        else:
            reason = f"constant {name} has value {magnitude:.3g} that flushes to 0 in fp16"
        for consumer in real_consumers(net, name):
            decisions.setdefault(consumer, (reason, magnitude))
    return decisions
