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
  deletes a stale file first and never modifies the caller's model.
- Models over 2 GB: `load_model(..., weights_on_disk=True)` keeps the weights
  in their file and `save_model` copies them file to file (`weights_on_disk.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto
from onnx.external_data_helper import uses_external_data

from trtpipe.errors import UserError
from trtpipe.onnxmodel.external_files import open_checked
from trtpipe.onnxmodel.model_parts import all_tensors, model_without_initializers, without_data
from trtpipe.onnxmodel.weights_on_disk import (
    anchor_external_tensor,
    copy_span,
    is_on_disk,
    load_into_memory,
    on_disk_span,
    read_bytes,
    set_external,
    tensor_nbytes,
)

logger = logging.getLogger(__name__)

# Just under protobuf's hard 2 GiB limit on one serialized message, leaving room
# for the graph structure that is not counted in a rough size estimate.
PROTOBUF_LIMIT_BYTES = 1_900_000_000

PROTOBUF_HARD_LIMIT_BYTES = 2**31 - 1

# Decision: models above this size are written with external data although one
# protobuf message could still hold them. Serializing and parsing protobuf runs
# at ~0.3 GB/s here (4.6 s to write a 1.36 GB FP16 encoder inline) and needs the
# whole message in memory; a data file is written and mapped at disk speed.
# TensorRT's parser, trtexec and ONNX Runtime read both forms.
EXTERNAL_DATA_THRESHOLD_BYTES = 256 << 20

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


def load_model(path: Path, load_external_data: bool = True, *, weights_on_disk: bool = False,
               hard_links_ok: bool = False) -> onnx.ModelProto:
    """Load an ONNX model; every problem the user can fix is a one-line `UserError`.

    `weights_on_disk=True`: external tensors are checked and anchored to their
    file instead of loaded (see `weights_on_disk`); what stages use, so a model
    over 2 GB never has its weights in memory. Either way each external data file
    is checked first (`external_files`: a regular file inside the model's folder,
    no link); `hard_links_ok=True` for trtpipe's own cache entries only, whose
    untouched weights file may be a hard link to the input entry's.
    """
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
    if weights_on_disk:
        for tensor in all_tensors(model):
            if uses_external_data(tensor):
                anchor_external_tensor(tensor, path.parent, path, hard_links_ok)
                # Decision: only weights stay on disk. Shape inference and TensorRT's parser
                # read small int64 shape tensors by value (exports with size_threshold=0 put them there).
                if not is_weight(tensor):
                    load_into_memory(tensor)
    elif load_external_data:
        _load_external_data(model, path.parent, path, hard_links_ok)
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


def _load_external_data(model: onnx.ModelProto, base_dir: Path, model_path: Path, hard_links_ok: bool) -> None:
    """Read every external tensor from its checked file (`external_files`), by descriptor."""
    for tensor in all_tensors(model):
        if not uses_external_data(tensor):
            continue
        anchor_external_tensor(tensor, base_dir, model_path, hard_links_ok)  # checks file, offset, length
        data_file, offset, length = on_disk_span(tensor)
        where = f"tensor {tensor.name!r} of model {model_path}"
        fd = open_checked(data_file, where, hard_links_ok)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(data) != length:
            raise UserError(f"external data file {data_file} of model {model_path} ended while tensor "
                            f"{tensor.name!r} was read (truncated meanwhile?)", "re-export the model")
        del tensor.external_data[:]
        # DEFAULT is the field's default: clearing it makes a model loaded from
        # external data serialize exactly like one that never was external.
        tensor.ClearField("data_location")
        tensor.raw_data = data


def save_model(
    model: onnx.ModelProto,
    path: Path,
    *,
    external_threshold_bytes: int | None = None,
    link_data_under: Path | None = None,
) -> list[Path]:
    """Write `model` to `path`; returns the files written.

    Same model in, same bytes out. If the model's estimated size exceeds
    `external_threshold_bytes` (default `EXTERNAL_DATA_THRESHOLD_BYTES`, read at call
    time), weight tensors of at least 1 KiB go to the one file
    `<path.name>.data` next to `path`; everything else stays inline. On-disk
    tensors (`weights_on_disk`) are copied file to file. The caller's model is
    never modified: what is written is a new message without the weights'
    bytes, so no copy of the weights is made in memory.

    `link_data_under`: a directory whose files never change (the cache's
    entries). When the data file would be a byte copy of a file below it
    (`data_file_source`), it is hard-linked instead: no copy at all. Never a
    user's file: onnx refuses to load a data file with two links, and the user's
    own model would become unloadable.
    """
    path = Path(path)
    threshold = EXTERNAL_DATA_THRESHOLD_BYTES if external_threshold_bytes is None else external_threshold_bytes
    _refuse_unloaded_external_data(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_path = external_data_path(path)
    _refuse_overwriting_own_weights(model, path, data_path)
    # Decision: unlink before writing instead of overwriting in place. A stale
    # `.data` must not be appended to, and a file that is a hard link into the
    # cache must not be truncated under the cache's feet.
    for stale in (path, data_path):
        if stale.is_file() or stale.is_symlink():
            stale.unlink()

    external = estimated_bytes(model) > threshold
    if not external and not any(is_on_disk(tensor) for tensor in all_tensors(model)):
        path.write_bytes(model.SerializeToString())
        return [path]

    written = model_without_initializers(model)
    with contextlib.ExitStack() as stack:
        data_file = None
        if external:
            source = data_file_source(model)
            if source is not None and _linked(source, data_path, link_data_under):
                data_file = _DataFile(None, data_path.name, replay=True)
            else:
                data_file = _DataFile(stack.enter_context(open(data_path, "wb")), data_path.name, copy_of=source)
        for tensor in model.graph.initializer:
            written.graph.initializer.append(_tensor_to_write(tensor, data_file))
        for tensor in all_tensors(written, initializers=False):
            _write_in_place(tensor, data_file)
    # Only an external model can still be too big (its inline tensors); a model under the
    # threshold is not measured again, since ByteSize() serializes it (seconds at 1.5 GB).
    if external and written.ByteSize() >= PROTOBUF_HARD_LIMIT_BYTES:
        raise RuntimeError(
            f"{path.name}: still {written.ByteSize()} bytes with its weights in {data_path.name}; "
            "the inline tensors (int64/int32, or floats not stored as raw_data) exceed protobuf's 2 GiB limit"
        )
    path.write_bytes(written.SerializeToString())
    if not external:
        return [path]
    logger.info("saved %s with its weight tensors in external file %s (model over %d bytes)",
                path, data_path.name, threshold)
    return [path, data_path]


def estimated_bytes(model: onnx.ModelProto) -> int:
    """The model's size as one message, estimated without serializing it.

    Decision: tensors are counted from their dims (exact for raw data), the
    graph structure at 64 bytes per node and value (a generous average); the
    thresholds leave far more than the difference below protobuf's hard limit.
    `ByteSize()` would serialize the whole model (seconds on 2 GB) and fails
    beyond 2 GiB.
    """
    graph = model.graph
    structure = len(graph.node) + len(graph.value_info) + len(graph.input) + len(graph.output)
    # A reference to external data that is not on disk (ONNX Runtime's mapped weights) is a few bytes.
    counted = (t for t in all_tensors(model) if is_on_disk(t) or not uses_external_data(t))
    return sum(tensor_nbytes(tensor) for tensor in counted) + 64 * structure


def _refuse_unloaded_external_data(model: onnx.ModelProto) -> None:
    for tensor in all_tensors(model):
        if uses_external_data(tensor) and not is_on_disk(tensor):
            raise ValueError(
                f"tensor {tensor.name!r} still refers to external data; load the model with "
                "load_external_data=True or weights_on_disk=True before saving it elsewhere"
            )


def _refuse_overwriting_own_weights(model: onnx.ModelProto, path: Path, data_path: Path) -> None:
    """Saving an on-disk model over the files its weights are read from would destroy them."""
    targets = {path.resolve(), data_path.resolve()}
    for tensor in all_tensors(model):
        if is_on_disk(tensor) and on_disk_span(tensor)[0].resolve() in targets:
            raise ValueError(f"cannot save to {path}: weight {tensor.name!r} is read from that file; "
                             "save to another path")


def is_weight(tensor: TensorProto) -> bool:
    """A tensor `save_model` moves to the external file when the model is large."""
    return (
        tensor.data_type in EXTERNAL_ELEMENT_TYPES
        and (tensor.HasField("raw_data") or is_on_disk(tensor))
        and tensor_nbytes(tensor) >= EXTERNAL_MIN_TENSOR_BYTES
    )


def _tensor_to_write(tensor: TensorProto, data_file: _DataFile | None) -> TensorProto:
    """The tensor as it is written: moved to `data_file`, read from disk into the message, or as it is."""
    if data_file is not None and is_weight(tensor):
        written = without_data(tensor)
        data_file.append(tensor, written)
        return written
    if is_on_disk(tensor):
        written = without_data(tensor)
        written.raw_data = read_bytes(tensor)
        return written
    return tensor


def _write_in_place(tensor: TensorProto, data_file: _DataFile | None) -> None:
    """Same as `_tensor_to_write` for a tensor of the message being written (already a copy)."""
    if data_file is not None and is_weight(tensor):
        data_file.append(tensor, tensor)
    elif is_on_disk(tensor):
        load_into_memory(tensor)


class _DataFile:
    """The external data file being written: tensors appended at aligned offsets.

    `copy_of`: a file known to hold exactly these bytes (`data_file_source`); it is
    copied whole and `append` only records where each tensor already is (as with
    `replay=True`, for a data file already in place: a hard link).
    """

    def __init__(self, file, location: str, copy_of: Path | None = None, replay: bool = False) -> None:
        self.file, self.location, self.replay = file, location, replay or copy_of is not None
        self.position = 0
        if copy_of is not None:
            copy_span(copy_of, 0, copy_of.stat().st_size, file)

    def append(self, source: TensorProto, target: TensorProto) -> None:
        offset = self.position + (-self.position % EXTERNAL_ALIGNMENT_BYTES)
        if self.replay:
            length = on_disk_span(source)[2]
        else:
            self.file.write(b"\0" * (offset - self.position))
            if is_on_disk(source):
                path, source_offset, length = on_disk_span(source)
                copy_span(path, source_offset, length, self.file)
            else:
                raw = source.raw_data
                length = len(raw)
                self.file.write(raw)
        self.position = offset + length
        set_external(target, self.location, offset, length)


def _linked(source: Path, data_path: Path, below: Path | None) -> bool:
    if below is None or not source.resolve().is_relative_to(Path(below).resolve()):
        return False
    try:
        os.link(source, data_path)
    except OSError:  # another file system, or links not supported: copy instead
        return False
    return True


def data_file_source(model: onnx.ModelProto) -> Path | None:
    """The one file `save_model` would write byte for byte as the model's data file, if any.

    True when every weight is on disk in that file, at exactly the offset
    `save_model` would give it (same order, 4096-byte alignment), the padding
    between them is zeros and nothing follows the last one: a model whose
    weights a pass did not touch (opset conversion, LayerNorm fusion). The file
    is then copied whole, and its digest, known from the cache entry it comes
    from, need not be computed again (runner/pipeline.py).
    """
    weights = [t for t in all_tensors(model) if is_weight(t)]  # the order save_model writes them in
    if not weights or not all(is_on_disk(t) for t in weights):
        return None
    spans = [on_disk_span(t) for t in weights]
    source = spans[0][0]
    position, gaps = 0, []
    for path, offset, length in spans:
        expected = position + (-position % EXTERNAL_ALIGNMENT_BYTES)
        if path != source or offset != expected:
            return None
        if expected > position:
            gaps.append((position, expected - position))
        position = offset + length
    if source.stat().st_size != position:
        return None
    with open(source, "rb") as handle:
        if any(os.pread(handle.fileno(), size, start).strip(b"\0") for start, size in gaps):
            return None
    return source


def _first_line(error: BaseException) -> str:
    """The error's whole text on one line (never shortened: its end often names the cause)."""
    return " ".join(str(error).split()) or type(error).__name__
