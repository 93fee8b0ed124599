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

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trtpipe.graph.weights_on_disk import tensor_array
from trtpipe.precision.decisions import FP16_MAX, FP16_MIN_SUBNORMAL
from trtpipe.precision.network import FLOAT_TYPES, Network
from trtpipe.precision.passthrough import real_consumers

_SMALL_TENSOR = 16
_FLUSH_SHARE = 0.01
_THREADS = 2


def constant_problems(net: Network, low_precision: str) -> dict[str, tuple[str, float]]:
    """tensor name -> (problem, magnitude) for constants that do not fit FP16 (BF16 has FP32's range).

    Decision: tensors are checked on two threads (reading a weight and NumPy's
    reductions release the GIL): on a 2.7 GB model this is every weight read once.
    """
    if low_precision != "fp16":
        return {}
    checked = [(name, tensor) for name, tensor in net.constants.items()
               if tensor.data_type in FLOAT_TYPES and real_consumers(net, name)]
    with ThreadPoolExecutor(max_workers=_THREADS) as pool:
        found = pool.map(lambda item: _problem(tensor_array(item[1])), checked)
        return {name: problem for (name, _), problem in zip(checked, found) if problem is not None}


def _problem(array: np.ndarray) -> tuple[str, float] | None:
    """Decision: in the tensor's own float type (no float64 copy of a 2 GB model's weights), with
    the cheap tests first; 65504 and FP16's flush threshold are exact in every float type checked."""
    if array.size == 0:
        return None
    values = array.ravel()
    if values.dtype not in (np.float16, np.float32, np.float64):  # bfloat16 (ml_dtypes): widen, exactly
        values = values.astype(np.float32)
    largest = float(np.fmax(values.max(), -values.min()))  # NaN only if every value is NaN
    if largest > FP16_MAX:
        return ("exceeds", largest)
    threshold = FP16_MIN_SUBNORMAL / 2
    below = np.count_nonzero((values < threshold) & (values > -threshold))  # zeros included
    if below == 0:
        return None
    nonzero = np.count_nonzero(values)
    tiny = below - (values.size - nonzero)
    if tiny and (values.size <= _SMALL_TENSOR or tiny > _FLUSH_SHARE * nonzero):
        magnitude = np.abs(values)
        return ("flushes", float(magnitude[(magnitude > 0) & (magnitude < threshold)].min()))
    return None


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
