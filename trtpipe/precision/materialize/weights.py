"""Convert float weights (initializers, Constant values) between fp32, fp16 and bf16.

Decisions:
- Finite values beyond the target's largest finite value are clipped to
  +-that value (65504 for fp16, 3.3895e38 for bf16) and reported, instead of
  becoming inf: an inf weight poisons everything downstream (FP32-min attention
  masks turn into -inf and then NaN via 0 * -inf). The planner normally keeps
  such consumers FP32; saturation is the fallback and is always reported.
  Infinities and NaNs that are already in the weights are kept as they are.
- bf16 is rounded to nearest, ties to even, on the float32 bit pattern
  (NumPy has no bfloat16): add 0x7FFF plus the lowest kept bit, drop the low
  16 bits. NaNs stay (quiet) NaNs. This is what `torch.Tensor.bfloat16()`
  and TensorRT do.
- fp16 rounds to nearest even too (fp16_cast.py: ONNX Runtime's Cast for large
  tensors, NumPy's cast for small ones; bit-identical).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import uses_external_data

from trtpipe.errors import UserError
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, load_into_memory, tensor_array
from trtpipe.precision.network.element_types import short_name
from trtpipe.precision.materialize.fp16_cast import to_float16

# Largest finite values: fp16 0x7BFF; bf16 0x7F7F (= float32 0x7F7F0000).
LARGEST_FINITE = {
    TensorProto.FLOAT16: 65504.0,
    TensorProto.BFLOAT16: float(np.array(0x7F7F0000, np.uint32).view(np.float32)),
}


@dataclass(frozen=True)
class ConvertedTensor:
    tensor: onnx.TensorProto
    # Largest |value| that had to be clipped, or None when nothing was clipped.
    saturated_max_abs: float | None


def convert_tensor(tensor: onnx.TensorProto, target: int, name: str, *, in_place: bool = False) -> ConvertedTensor:
    """`tensor`'s values as element type `target`, under `name`; clipped as described above.

    `in_place=True` rewrites `tensor` itself (name unchanged) instead of building a
    new message: a new one would be copied into the graph again (1-3 s on 1.4 GB).
    """
    values = float32_values(tensor)
    saturated_max_abs = None
    limit = LARGEST_FINITE.get(target)
    # Cheap test first (one pass; a NaN or inf maximum takes the full path): most weights are far inside the range.
    if limit is not None and values.size and not max(float(values.max()), -float(values.min())) <= limit:
        magnitude = np.abs(values)
        beyond = np.isfinite(values) & (magnitude > limit)
        if beyond.any():
            saturated_max_abs = float(magnitude[beyond].max())
            values = np.where(beyond, np.copysign(np.float32(limit), values), values).astype(np.float32)
    if in_place:
        _overwrite(tensor, target, _target_bytes(values, target))
        return ConvertedTensor(tensor, saturated_max_abs)
    if target == TensorProto.BFLOAT16:
        converted = bfloat16_tensor(bfloat16_bits(values), list(tensor.dims), name)
    elif target == TensorProto.FLOAT16:
        converted = numpy_helper.from_array(to_float16(values), name)
    elif target == TensorProto.FLOAT:
        converted = numpy_helper.from_array(values, name)
    else:
        raise ValueError(f"cannot convert weights to {short_name(target)}")
    converted.doc_string = tensor.doc_string
    return ConvertedTensor(converted, saturated_max_abs)


def _target_bytes(values: np.ndarray, target: int) -> bytes:
    if target == TensorProto.BFLOAT16:
        return np.ascontiguousarray(bfloat16_bits(values), dtype="<u2").tobytes()
    if target == TensorProto.FLOAT16:
        return np.ascontiguousarray(to_float16(values), dtype="<f2").tobytes()
    if target == TensorProto.FLOAT:
        return np.ascontiguousarray(values, dtype="<f4").tobytes()
    raise ValueError(f"cannot convert weights to {short_name(target)}")


def _overwrite(tensor: onnx.TensorProto, target: int, data: bytes) -> None:
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "external_data"):
        tensor.ClearField(field)
    tensor.ClearField("data_location")
    tensor.data_type = target
    tensor.raw_data = data


def float32_values(tensor: onnx.TensorProto) -> np.ndarray:
    """The values of a FLOAT, FLOAT16 or BFLOAT16 tensor as a float32 array of its shape."""
    if uses_external_data(tensor) and not is_on_disk(tensor):
        raise UserError(
            f"weight {tensor.name!r} is still in an external data file and cannot be converted",
            "load the model with its external data (trtpipe.onnxmodel.onnx_io.load_model does)",
        )
    if is_on_disk(tensor) and tensor.data_type != TensorProto.BFLOAT16:
        return tensor_array(tensor).astype(np.float32, copy=False)
    if is_on_disk(tensor):
        return float32_values(_loaded(tensor))
    if tensor.data_type == TensorProto.BFLOAT16:
        if tensor.HasField("raw_data"):
            bits = np.frombuffer(tensor.raw_data, dtype="<u2")
        else:
            bits = np.asarray(tensor.int32_data, dtype=np.uint32).astype(np.uint16)
        return bfloat16_bits_to_float32(bits).reshape(tuple(tensor.dims))
    return numpy_helper.to_array(tensor).astype(np.float32, copy=False)


def _loaded(tensor: onnx.TensorProto) -> onnx.TensorProto:
    loaded = onnx.TensorProto()
    loaded.CopyFrom(tensor)
    load_into_memory(loaded)
    return loaded


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even, NaN kept."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    lowest_kept_bit = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lowest_kept_bit) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact widening: a bfloat16 is the upper half of a float32."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def bfloat16_tensor(bits: np.ndarray, dims: list[int], name: str) -> onnx.TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=dims)
    tensor.raw_data = np.ascontiguousarray(bits, dtype="<u2").tobytes()
    return tensor
