"""Element types of sample inputs: what a model input may be fed, and what a file can hold.

Decisions (found by the corpus run, bench/corpus/corpus.py, on ONNX's backend models):
- Only tensor inputs can be fed: sample inputs (`data.inputs`, `.npz`,
  Polygraphy JSON) are arrays. A sequence-, optional- or map-typed input is a
  `UserError` naming the input and its type, before anything else is checked
  (not "no values for input x", which asks for what no file can hold).
- Types NumPy has no native dtype for (bfloat16, the float8/float4 family,
  int4/uint4, int2/uint2: `ml_dtypes` types) are written by `numpy.savez` as
  raw bytes (`|V2`, `|V1`), and float8_e5m2 as a descriptor `numpy.load`
  cannot read back. Such an input accepts an array of raw bits of the same
  width (void, or unsigned integers: `array.view(np.uint8)`), taken bit for
  bit as the model's type.
- String inputs: `.npz` holds strings only as fixed-width text (`dtype=str`
  or bytes); an object array would need unpickling, which is never done. Text
  arrays are fed as the object arrays ONNX Runtime expects.
- Byte order is not a type (issue 32, item 11): an array saved big-endian (`'>f4'`, as
  from a big-endian machine or `astype('>f4')`) holds the same values as the native one,
  so it is converted to native byte order and taken, not refused with "save it as
  float32" (which it is). Converting loses nothing; refusing would ask the user to
  rewrite a correct file. Raw-bits inputs are converted first too, so their bits are read
  in the order they were written.
"""


from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from trtpipe.errors import UserError

NON_TENSOR_KINDS = {"sequence_type": "a sequence", "optional_type": "an optional", "map_type": "a map",
                    "sparse_tensor_type": "a sparse tensor"}
RAW_BITS_FIX = "save it as its raw bits of the same width, e.g. array.view(np.uint8), and trtpipe reads them as {dtype}"


def declared_dtype(value: onnx.ValueInfoProto) -> np.dtype:
    """The NumPy dtype of a tensor input; a `UserError` for any other kind of input."""
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UserError(
            f"model input {value.name!r} is {NON_TENSOR_KINDS.get(kind, 'an untyped value')}, not a tensor; "
            "sample inputs (data.inputs, or .npz / Polygraphy JSON in data.path) are tensors",
            "re-export the model with tensor inputs, or run without the stages that run the model "
            "(precision.auto.max_abs=null and no validate stage)",
        )
    elem_type = value.type.tensor_type.elem_type
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"model input {value.name!r} has element type {elem_type} "
            f"({onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else '?'}), "
            "which has no NumPy equivalent",
            "re-export the model with inputs of a standard element type",
        ) from None


def is_raw_stored(dtype: np.dtype) -> bool:
    """True for the `ml_dtypes` types that files hold only as raw bits."""
    return dtype.type.__module__ == "ml_dtypes"


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (is_raw_stored(dtype) and "float" in dtype.name)


def as_declared(array: np.ndarray, dtype: np.dtype, name: str, where: str) -> np.ndarray:
    """`array` as the input's declared `dtype` where that is lossless; else a `UserError`."""
    if not array.dtype.isnative:  # the same values in the machine's byte order (decision above)
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype == dtype:
        return array
    if is_raw_stored(dtype) and array.dtype.kind in "Vu" and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    if dtype.kind == "O" and array.dtype.kind in "US":
        return array.astype(object)
    fix = f"save it as {dtype}"
    if is_raw_stored(dtype):
        fix = RAW_BITS_FIX.format(dtype=dtype)
    elif dtype.kind == "O":
        fix = "save strings as a fixed-width text array, np.array(values, dtype=str)"
    raise UserError(f"input {name!r} in {where} is {array.dtype}, the model expects {dtype}", fix)


def unreadable_npz_fix(error: Exception) -> str:
    """The fix for an .npz `numpy.load` refused, by what it refused."""
    text = str(error)
    if "Object arrays" in text:
        return ("trtpipe does not unpickle object arrays: save strings as fixed-width text, "
                "np.array(values, dtype=str)")
    if "descr is not a valid dtype descriptor" in text:
        return ("NumPy cannot read back some ml_dtypes arrays (float8_e5m2): "
                + RAW_BITS_FIX.format(dtype="the model's type"))
    return "write it with numpy.savez"
