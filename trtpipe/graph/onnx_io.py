"""Read and write ONNX files: clear errors on load, deterministic bytes on save.

Every graph pass goes through these two functions, so the traps of ONNX file
handling are dealt with once, here:

- `onnx.load` reports a missing file, an empty file, a text file or a missing
  external-data file as a protobuf or OS traceback; `load_model` turns each into
  a one-line `UserError` that names the file and the fix.
- Saving with external data: a low size threshold moves small int64 shape
  tensors out of the model, which TensorRT's parser and ONNX shape inference
  then cannot read; onnx appends to (or refuses) an existing `.data` file; and
  `convert_model_to_external_data` mutates the caller's model. `save_model`
  writes the external file itself, moves only weight tensors of at least 1 KiB,
  deletes a stale file first and restores the model before returning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from trtpipe.errors import UserError

logger = logging.getLogger(__name__)

# Just under protobuf's hard 2 GiB limit on one serialized message, leaving room
# for the graph structure that is not counted in a rough size estimate.
PROTOBUF_LIMIT_BYTES = 1_900_000_000

PROTOBUF_HARD_LIMIT_BYTES = 2**31 - 1

# Decision: only tensors of at least this size go to the external file. Small
# tensors (biases, scalars, shape constants) are read by shape inference and by
# TensorRT's parser while it builds shapes; keeping them inline costs nothing.
EXTERNAL_MIN_TENSOR_BYTES = 1024

# Decision: the element types that may move out of the model are weight types:
# floats and the 8/4-bit integers of quantized weights. int64/int32 (shapes,
# indices, axes), bool and strings always stay inline: a shape tensor in an
# external file is the known trap described in the module docstring.
EXTERNAL_ELEMENT_TYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.DOUBLE,
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT4,
        TensorProto.UINT4,
    }
)

# Each tensor starts on a page boundary so ONNX Runtime and TensorRT can
# memory-map it; the padding is below 4 KiB per tensor.
EXTERNAL_ALIGNMENT_BYTES = 4096


def external_data_path(model_path: Path) -> Path:
    """The one external-data file `save_model` may write next to `model_path`."""
    return model_path.with_name(model_path.name + ".data")


def load_model(path: Path, load_external_data: bool = True) -> onnx.ModelProto:
    """Load an ONNX model; every problem the user can fix is a one-line `UserError`."""
    path = Path(path)
    _check_readable_file(path)
    try:
        # format="protobuf": onnx guesses the format from the suffix, and a
        # model named `*.txt` or `*.json` would otherwise be parsed as text.
        model = onnx.load_model(str(path), format="protobuf", load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise UserError(
            f"model file {path} is not a valid ONNX protobuf (truncated or corrupt: {_first_line(error)})",
            "re-export the model or check model.path",
        ) from None
    if not model.HasField("graph") or not model.graph.output or not model.opset_import:
        raise UserError(
            f"model file {path} is not an ONNX model (it has no graph, outputs or opset)",
            "check that model.path points to an .onnx file",
        )
    if load_external_data:
        _load_external_data(model, path.parent, path)
    return model


def _check_readable_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"model file {path} does not exist", "check model.path")
    if not path.is_file():
        raise UserError(f"model file {path} is not a file", "check model.path")
    if not os.access(path, os.R_OK):
        raise UserError(f"model file {path} is not readable", "check its permissions")
    if path.stat().st_size == 0:
        raise UserError(f"model file {path} is empty", "re-export the model or check model.path")


def _load_external_data(model: onnx.ModelProto, base_dir: Path, model_path: Path) -> None:
    """Read every external tensor, naming the data file when it is missing or short."""
    for tensor in _all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = ExternalDataInfo(tensor)
        data_file = base_dir / info.location
        if not data_file.is_file():
            raise UserError(
                f"external data file {data_file} of model {model_path} does not exist "
                f"(needed by tensor {tensor.name!r})",
                "copy it next to the model or re-export the model",
            )
        try:
            onnx.external_data_helper.load_external_data_for_tensor(tensor, str(base_dir))
        except Exception as error:  # onnx raises ValueError/ValidationError/OSError here
            raise UserError(
                f"external data file {data_file} of model {model_path} cannot be read for tensor "
                f"{tensor.name!r} ({_first_line(error)})",
                "re-export the model; the data file may be truncated, or a hard link or symlink (onnx refuses both)",
            ) from None
        # DEFAULT is the field's default: clearing it makes a model loaded from
        # external data serialize exactly like one that never was external.
        tensor.ClearField("data_location")


def save_model(
    model: onnx.ModelProto,
    path: Path,
    *,
    external_threshold_bytes: int = PROTOBUF_LIMIT_BYTES,
) -> list[Path]:
    """Write `model` to `path`; returns the files written.

    Same model in, same bytes out. If the serialized model exceeds
    `external_threshold_bytes`, weight tensors of at least 1 KiB go to the one
    file `<path.name>.data` next to `path`; everything else stays inline.
    The caller's model is left exactly as it was.
    """
    path = Path(path)
    _refuse_unloaded_external_data(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_path = external_data_path(path)
    # Decision: unlink before writing instead of overwriting in place. A stale
    # `.data` must not be appended to, and a file that is a hard link into the
    # cache must not be truncated under the cache's feet.
    for stale in (path, data_path):
        if stale.is_file() or stale.is_symlink():
            stale.unlink()

    if model.ByteSize() <= external_threshold_bytes:
        path.write_bytes(model.SerializeToString())
        return [path]

    moved = _move_weights_to_file(model, data_path)
    try:
        if model.ByteSize() >= PROTOBUF_HARD_LIMIT_BYTES:
            raise RuntimeError(
                f"{path.name}: still {model.ByteSize()} bytes with its weights in {data_path.name}; "
                "the inline tensors (int64/int32, or floats not stored as raw_data) exceed protobuf's 2 GiB limit"
            )
        path.write_bytes(model.SerializeToString())
    finally:
        _restore_weights_from_file(moved, data_path)
    logger.info(
        "saved %s with %d weight tensors in external file %s (model over %d bytes)",
        path, len(moved), data_path.name, external_threshold_bytes,
    )
    return [path, data_path]


def _refuse_unloaded_external_data(model: onnx.ModelProto) -> None:
    for tensor in _all_tensors(model):
        if uses_external_data(tensor):
            raise ValueError(
                f"tensor {tensor.name!r} still refers to external data; load the model with "
                "load_external_data=True before saving it elsewhere"
            )


def _is_external_candidate(tensor: TensorProto) -> bool:
    return (
        tensor.data_type in EXTERNAL_ELEMENT_TYPES
        and tensor.HasField("raw_data")
        and len(tensor.raw_data) >= EXTERNAL_MIN_TENSOR_BYTES
    )


def _move_weights_to_file(model: onnx.ModelProto, data_path: Path) -> list[tuple]:
    """Write candidate tensors to `data_path`, leaving references in the model."""
    moved: list[tuple] = []
    try:
        with open(data_path, "wb") as data_file:
            for tensor in _all_tensors(model):
                if _is_external_candidate(tensor):
                    moved.append(_move_one(tensor, data_file, data_path.name))
    except BaseException:  # e.g. disk full: the caller's model must still come back whole
        _restore_weights_from_file(moved, data_path)
        raise
    return moved


def _move_one(tensor: TensorProto, data_file, location: str) -> tuple:
    data_file.write(b"\0" * (-data_file.tell() % EXTERNAL_ALIGNMENT_BYTES))
    offset = data_file.tell()
    raw = tensor.raw_data
    data_file.write(raw)
    record = (tensor, offset, len(raw), tensor.HasField("data_location"), tensor.data_location)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", len(raw))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return record


def _restore_weights_from_file(moved: list[tuple], data_path: Path) -> None:
    """Put the bytes back so the caller's model is unchanged (no in-memory copy kept)."""
    with open(data_path, "rb") as data_file:
        for tensor, offset, length, location_was_set, location in moved:
            data_file.seek(offset)
            del tensor.external_data[:]
            tensor.raw_data = data_file.read(length)
            if location_was_set:
                tensor.data_location = location
            else:
                tensor.ClearField("data_location")


def _all_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Initializers and tensor attributes of every graph and subgraph, in file order."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node: onnx.NodeProto) -> Iterator[TensorProto]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("g"):
            yield from _graph_tensors(attribute.g)
        for subgraph in attribute.graphs:
            yield from _graph_tensors(subgraph)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
