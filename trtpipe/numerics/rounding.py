"""The low-precision float types the emulator rounds to, and NumPy references for that rounding.

The emulator itself rounds with ONNX Runtime `Cast` nodes (FP32 -> FP16/BF16 ->
FP32), so that the rounding happens inside the one graph run. The functions
here compute the same rounding in NumPy, bit by bit, so tests (and anyone
doubting the emulator) can check ONNX Runtime's `Cast` against an independent
definition: IEEE 754 round-to-nearest-even, overflow to +-inf, NaN kept NaN.

Decision: only FP16 and BF16 are emulated. FP8/FP4 tensors need scaling
semantics (Q/DQ, block scales) that a Cast pair does not capture, so the
emulator refuses them instead of pretending (see `emulated_graph.py`).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

# ONNX element type -> the short precision name used in reports and plans.
LOW_PRECISION_TYPES: dict[int, str] = {
    TensorProto.FLOAT16: "fp16",
    TensorProto.BFLOAT16: "bf16",
}

# Float types the emulator computes in as they are (FP32 is the compute type,
# FP64 is wider and is left alone).
FULL_PRECISION_TYPES: dict[int, str] = {
    TensorProto.FLOAT: "fp32",
    TensorProto.DOUBLE: "fp64",
}

# Float types nobody should feed to the emulator: refused with a clear message.
UNSUPPORTED_FLOAT_TYPES: dict[int, str] = {
    TensorProto.FLOAT8E4M3FN: "fp8e4m3fn",
    TensorProto.FLOAT8E4M3FNUZ: "fp8e4m3fnuz",
    TensorProto.FLOAT8E5M2: "fp8e5m2",
    TensorProto.FLOAT8E5M2FNUZ: "fp8e5m2fnuz",
}
if hasattr(TensorProto, "FLOAT4E2M1"):  # onnx >= 1.18
    UNSUPPORTED_FLOAT_TYPES[TensorProto.FLOAT4E2M1] = "fp4e2m1"


def precision_name(elem_type: int) -> str:
    """`fp16`, `bf16`, `fp32`, `fp64`, `fp8...`, or the ONNX type name in lower case (`int64`, `bool`)."""
    for table in (LOW_PRECISION_TYPES, FULL_PRECISION_TYPES, UNSUPPORTED_FLOAT_TYPES):
        if elem_type in table:
            return table[elem_type]
    if elem_type == TensorProto.UNDEFINED:
        return "unknown"
    return TensorProto.DataType.Name(elem_type).lower()


def is_float_type(elem_type: int) -> bool:
    return (
        elem_type in LOW_PRECISION_TYPES
        or elem_type in FULL_PRECISION_TYPES
        or elem_type in UNSUPPORTED_FLOAT_TYPES
    )


def round_to_fp16(values: np.ndarray) -> np.ndarray:
    """FP32 values rounded to the nearest FP16 value (ties to even), returned as FP32.

    NumPy's float32 -> float16 conversion is IEEE round-to-nearest-even with
    overflow to inf (65520 and above become inf), which is what TensorRT's
    FP16 storage does.
    """
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """FP32 values rounded to the nearest BF16 value (ties to even), returned as FP32.

    BF16 is the upper 16 bits of an FP32. Rounding to nearest even adds
    0x7FFF plus the lowest kept bit to the 32-bit pattern, then clears the low
    16 bits; a carry into the exponent is exactly the round-up to the next
    binade or to inf. NaN is handled apart so the addition cannot turn a NaN
    with a low payload into inf.
    """
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    lowest_kept_bit = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lowest_kept_bit) & 0xFFFF0000).astype(np.uint32)
    result = rounded.view(np.float32).copy()
    result[np.isnan(values)] = np.nan
    return result.reshape(values.shape)
