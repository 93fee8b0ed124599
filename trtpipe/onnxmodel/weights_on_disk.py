"""Weights that stay in their file while a stage edits the graph.

A model over 2 GB cannot be one protobuf message, and every in-memory copy of
its weights costs its size again (protobuf's upb backend even keeps cleared
fields until the whole message dies). So a stage loads such a model's graph
only: each external tensor keeps its `external_data` entries, with `location`
made *absolute* ("anchored") so that the tensor says by itself which file
holds its bytes, wherever the model travels inside the stage. Such a tensor
is "on disk".

Rules that keep this safe:
- An absolute location never reaches a written file: `onnx_io.save_model`
  copies on-disk bytes into the new model's own data file (or inline) and
  writes relative locations. onnx and ONNX Runtime refuse absolute locations,
  so a leak could not go unnoticed either.
- Values are read by `tensor_array` (one tensor at a time, mapped straight from
  the file, read-only), never by `numpy_helper.to_array`, which refuses absolute
  locations.
- Bytes are copied file to file with `os.copy_file_range` (in the kernel: no
  copy through Python's memory).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from trtpipe.onnxmodel.external_files import checked_data_file, checked_span

_FOUR_BIT_TYPES = frozenset({TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", -1)})
_COPY_CHUNK_BYTES = 1 << 30


def is_on_disk(tensor: TensorProto) -> bool:
    """An external tensor anchored by `anchor_external_tensor` (its location is absolute)."""
    return uses_external_data(tensor) and Path(_external_fields(tensor).get("location", "")).is_absolute()


def anchor_external_tensor(tensor: TensorProto, base_dir: Path, model_path: Path,
                           hard_links_ok: bool = False) -> None:
    """Make an external tensor's location absolute after checking its file holds its bytes.

    The file must be one trtpipe may read (`external_files`: a regular file inside the
    model's folder, no link); `hard_links_ok` only for trtpipe's own cache entries."""
    info = _external_fields(tensor)
    where = f"tensor {tensor.name!r} of model {model_path}"
    data_file = checked_data_file(base_dir, info.get("location", ""), tensor.name, model_path, hard_links_ok)
    needed = None if tensor.data_type == TensorProto.STRING else tensor_nbytes(tensor)
    offset, length = checked_span(info.get("offset"), info.get("length"), needed,
                                  os.stat(data_file).st_size, data_file, where)
    set_external(tensor, str(data_file), offset, length)


def _external_fields(tensor: TensorProto) -> dict[str, str]:
    """The tensor's external_data entries as written (onnx's ExternalDataInfo raises a bare
    ValueError on a negative offset: the caller reports it as the model's error instead)."""
    return {entry.key: entry.value for entry in tensor.external_data}


def on_disk_span(tensor: TensorProto) -> tuple[Path, int, int]:
    """(file, offset, length) of an on-disk tensor's bytes."""
    info = ExternalDataInfo(tensor)
    length = info.length if info.length is not None else tensor_nbytes(tensor)
    return Path(info.location), int(info.offset or 0), int(length)


def read_bytes(tensor: TensorProto) -> bytes:
    path, offset, length = on_disk_span(tensor)
    with open(path, "rb") as data_file:
        data_file.seek(offset)
        return data_file.read(length)


def tensor_array(tensor: TensorProto) -> np.ndarray:
    """A tensor's values; an on-disk tensor is read from its file (nothing else is loaded)."""
    if not is_on_disk(tensor):
        return numpy_helper.to_array(tensor)
    dtype = _plain_numpy_dtype(tensor.data_type)
    path, offset, length = on_disk_span(tensor)
    count = math.prod(tensor.dims)
    if dtype is not None and count and length == count * dtype.itemsize:
        # Decision: a read-only memory map, not a read: NumPy's reductions then read the page
        # cache directly (measured 2.7x faster than np.fromfile's copy for max/min over 2.3 GB).
        # Callers treat the values as read-only; the mapping lives as long as the array.
        mapped = np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r", offset=offset, shape=(count,))
        return mapped.reshape(tuple(tensor.dims))
    loaded = TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    loaded.raw_data = read_bytes(tensor)
    return numpy_helper.to_array(loaded)


def _plain_numpy_dtype(data_type: int) -> np.dtype | None:
    """NumPy's own dtype for an ONNX element type; None for types stored differently (bfloat16, 4-bit)."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type))
    except (KeyError, TypeError, ValueError):
        return None
    return dtype if dtype.kind in "biufc" and data_type not in _FOUR_BIT_TYPES else None


def load_into_memory(tensor: TensorProto) -> None:
    """Replace an on-disk tensor's reference by its bytes (for the few tensors a pass must read)."""
    data = read_bytes(tensor)
    del tensor.external_data[:]
    tensor.ClearField("data_location")
    tensor.raw_data = data


def tensor_nbytes(tensor: TensorProto) -> int:
    """The size of a tensor's values from its dims and type, without touching its data.

    Reading `raw_data` just to measure it copies the bytes, and protobuf's
    `ByteSize()` serializes the message: on a 2 GB model both cost seconds.
    """
    count = math.prod(tensor.dims)
    if tensor.data_type == TensorProto.STRING:
        return sum(len(value) for value in tensor.string_data)
    if tensor.data_type in _FOUR_BIT_TYPES:
        return (count + 1) // 2
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):  # a type newer than this onnx: assume 4 bytes
        itemsize = 4
    return count * itemsize


def copy_span(source: Path, offset: int, length: int, target) -> None:
    """Append `length` bytes of `source` from `offset` to the open binary file `target`."""
    target.flush()
    with open(source, "rb") as source_file:
        remaining = length
        while remaining:
            try:
                copied = os.copy_file_range(source_file.fileno(), target.fileno(),
                                            min(remaining, _COPY_CHUNK_BYTES), offset)
            except (AttributeError, OSError):  # no copy_file_range here (or across these file systems)
                copied = _copy_by_reading(source_file, offset, min(remaining, _COPY_CHUNK_BYTES), target)
            if copied == 0:
                raise OSError(f"{source} ended before byte {offset + remaining} (truncated while in use?)")
            offset += copied
            remaining -= copied
    # copy_file_range moves the file position of `target`; keep Python's view of it in sync.
    target.seek(0, os.SEEK_END)


def _copy_by_reading(source_file, offset: int, length: int, target) -> int:
    source_file.seek(offset)
    data = source_file.read(length)
    target.write(data)
    target.flush()
    return len(data)


def set_external(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    """Point `tensor` at `length` bytes of `location` from `offset`; its in-memory data is cleared."""
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
