"""One ONNX Runtime session on the CPU, run exactly as the graph is written.

Shared by `ReferenceRunner` and `EmulatedRunner`, so both run under the same
rules:

- `GraphOptimizationLevel.ORT_DISABLE_ALL`: ONNX Runtime's fusions (LayerNorm,
  GELU, MatMul+Add, Cast elimination) would compute across the emulator's
  rounding points and hide the very overflow it exists to show; the reference
  is run the same way so that both sides compute op by op, and so that
  exposing intermediates as outputs cannot change which fusions happen.
- `CPUExecutionProvider` only: the result must not depend on which providers
  happen to be installed.
- Extra outputs are added to a copy of the model as untyped outputs (ONNX
  Runtime infers their types), never to the caller's model.
- Feeds: a float array whose float type differs from the input's declared
  type is converted (`astype`, round to nearest even), so the same sample
  inputs drive an FP32 reference and a candidate with FP16 inputs; that is
  what a user feeding the engine FP16 would do. Other mismatches and missing
  or unknown inputs are user errors naming the input.
- Weights on disk (`trtpipe/onnxmodel/weights_on_disk.py`) stay there: ONNX Runtime
  refuses the anchored absolute locations, so the session's model names them
  relative to their folder and the folder is given as a session option
  (ONNX Runtime then maps the file: measured on a 2.7 GB model, 1.04x its
  size in memory and 4 s, against 2x and 6-8 s for arrays handed over with
  `add_external_initializers`). Other models over protobuf's 2 GiB limit are
  written to a temporary directory (external data) that lives as long as the
  session.
- `user_model=True` (the reference: the model as the user gave it): when ONNX
  Runtime cannot load or run it (an IR version or opset newer than it
  supports, an op or type it does not implement, a kernel failing on the
  sample inputs), that is a `UserError` quoting ONNX Runtime's reason without
  its C++ source location. Otherwise (the emulation, a graph trtpipe built)
  the failure is trtpipe's: a `TrtpipeGraphError` that names the graph
  (`graph`, e.g. "the search's switched emulation graph") and says the model is not
  what failed, with ONNX Runtime's reason.
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from trtpipe.errors import TrtpipeGraphError, UserError, is_out_of_memory
from trtpipe.onnxmodel.model_parts import all_tensors, model_without_initializers
from trtpipe.onnxmodel.onnx_io import PROTOBUF_LIMIT_BYTES, estimated_bytes, save_model
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, load_into_memory, on_disk_span, set_external
from trtpipe.numerics.ort_logging import cpu_session, session_options

logger = logging.getLogger(__name__)


def with_extra_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of `model` whose graph also outputs `names` (existing outputs first, no duplicates)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {value.name for value in copy.graph.output}
    for name in names:
        if name not in present:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return copy


class OrtSession:
    """A CPU session with optimisations off; `run` returns every output by name."""

    def __init__(self, model: onnx.ModelProto, *, user_model: bool = False, graph: str = "") -> None:
        """`graph`: what trtpipe built, for its failures (e.g. "the emulation graph of the FP16 candidate")."""
        self.user_model = user_model
        self.graph = graph or "a graph trtpipe built from the model"
        options = session_options()  # ORT's own coloured lines never reach the terminal (ort_logging.py)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # Idle ORT threads spin-wait by default; on a small machine they steal the cores
        # NumPy and the next session need (measured: a precision search 3-4x slower).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        # Prepacking rearranges every MatMul weight at session start to speed up many later
        # runs; trtpipe runs each session a few times (measured on a 2.7 GB encoder: start
        # 4.8 s -> 0.1 s, two runs 0.55 s -> 1.6 s, and no packed copy of the weights).
        options.add_session_config_entry("session.disable_prepacking", "1")
        self._tmp = None
        model = _with_weights_in_place(model, options)
        if estimated_bytes(model) <= PROTOBUF_LIMIT_BYTES:
            source = model.SerializeToString()
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="trtpipe_validate_")
            source = str(Path(self._tmp.name) / "model.onnx")
            save_model(model, Path(source), external_threshold_bytes=0)
        try:
            self.session = _session(source, options)
        except UserError:
            raise
        except Exception as error:  # ONNX Runtime's exception types (Fail, InvalidGraph, NotImplemented, ...)
            raise self._failure(error, "load") from None
        self.output_names = [output.name for output in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        prepared = self._prepared(feeds)
        try:
            arrays = self.session.run(None, prepared)
        except Exception as error:  # ONNX Runtime's exception types
            raise self._failure(error, "run") from None
        return dict(zip(self.output_names, arrays))

    def _failure(self, error: Exception, action: str) -> Exception:
        reason = ort_reason(error)
        if is_out_of_memory(error) or is_out_of_memory(RuntimeError(reason)):
            # Decision: running out of memory is the machine's limit, not a defect of the model or of
            # trtpipe's emulation (a session that is not the user's model included): exit 2, one
            # line, in every stage that runs the model (precision's reference run and validate's).
            return UserError(f"ONNX Runtime {ort.__version__} ran out of memory to {action} the model: {reason}",
                             "free memory (or raise this process's memory limit), or use fewer or smaller sample "
                             "inputs: data.iterations=1, smaller dynamic sizes in data.inputs.<input>.shape")
        if not self.user_model:
            return TrtpipeGraphError(
                f"ONNX Runtime cannot {action} trtpipe's own graph ({self.graph}), not the model as given, "
                f"which is not what failed: {reason}. This is a trtpipe defect: please report it with trtpipe.log")
        if action == "load":
            fix = ("use an onnxruntime that supports it, or run without what runs the model "
                   "(precision.auto.max_abs=null, no validate stage)")
        elif "can't be converted to MLDataType" in reason:  # an ml_dtypes array (bfloat16, float8, int4)
            fix = ("ONNX Runtime's Python API takes no bfloat16/float8/int4 arrays: give the model "
                   "float32 or float16 inputs (cast inside the model)")
        else:
            fix = "check that the sample inputs (data.inputs ranges and shapes, or data.path) are valid for the model"
        return UserError(f"ONNX Runtime {ort.__version__} cannot {action} the model: {reason}", fix)

    def _prepared(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = {value.name: value for value in self.session.get_inputs()}
        unknown = sorted(set(feeds) - set(expected))
        if unknown:
            raise UserError(
                f"sample inputs {unknown} are not inputs of the model (its inputs: {sorted(expected)})",
                "rename or remove them in data.inputs / data.path",
            )
        missing = sorted(set(expected) - set(feeds))
        if missing:
            raise UserError(
                f"no sample values for model inputs {missing}",
                f"set data.inputs.{missing[0]} or include it in data.path",
            )
        prepared = {}
        for name, value in feeds.items():
            array = np.asarray(value)
            declared = _numpy_dtype(expected[name].type)
            if declared is None or array.dtype == declared:
                prepared[name] = array
            elif array.dtype.kind == "f" and declared.kind == "f":
                logger.debug("input %s: %s values converted to the model's %s", name, array.dtype, declared)
                prepared[name] = array.astype(declared)
            else:
                raise UserError(
                    f"sample input {name!r} is {array.dtype} but the model expects {declared}",
                    f"give {name} as {declared} (data.inputs.{name}.dtype or the arrays in data.path)",
                )
        return prepared


# ONNX Runtime's session option for models given as bytes whose external data lives elsewhere.
_EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"


def _with_weights_in_place(model: onnx.ModelProto, options: "ort.SessionOptions") -> onnx.ModelProto:
    """The model for the session: on-disk weights named relative to their folder, given as an option."""
    on_disk = [tensor for tensor in all_tensors(model) if is_on_disk(tensor)]
    if not on_disk:
        return model
    folders = {on_disk_span(tensor)[0].parent for tensor in on_disk}
    folder = folders.pop() if len(folders) == 1 else None
    runnable = model_without_initializers(model)
    for tensor in model.graph.initializer:
        runnable.graph.initializer.append(tensor)
    for tensor in all_tensors(runnable):
        if not is_on_disk(tensor):
            continue
        if folder is None:  # weights from several folders (not made by trtpipe's stages): read them in
            load_into_memory(tensor)
        else:
            path, offset, length = on_disk_span(tensor)
            set_external(tensor, path.name, offset, length)
    if folder is not None:
        options.add_session_config_entry(_EXTERNAL_DATA_FOLDER, str(folder))
    return runnable


def ort_reason(error: Exception) -> str:
    """ONNX Runtime's message on one line, without its error-code prefix and C++ source location.

    Never shortened: the message is the user's only clue, and its end often names the node.
    """
    text = " ".join(str(error).split())
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    location = re.search(r"/onnxruntime_src/\S+:\d+ ", text)
    if location:  # `path:line Namespace::Function(args...) message`: keep the message
        rest, depth = text[location.end():], 0
        for index, char in enumerate(rest):
            depth += (char == "(") - (char == ")")
            if char == ")" and depth == 0:
                rest = rest[index + 1:]
                break
        text = text[:location.start()] + rest.strip()
    return _kernel_versions_summed_up(text)


_VERSION_MISMATCH = re.compile(r"Version mismatch\. node_version: (\d+) kernel start version: (\d+) "
                               r"kernel_end_version: (\d+)")


def _kernel_versions_summed_up(text: str) -> str:
    """ONNX Runtime lists one "Version mismatch" clause per registered kernel (a DequantizeLinear-28
    made 40 of them, 3,000 characters, measured by bench.corpus): the same fact, once, with the
    kernels' version ranges, keeps the message one readable line without losing what it says."""
    found = list(_VERSION_MISMATCH.finditer(text))
    if len(found) < 2:
        return text
    def span(start: str, end: str) -> str:
        return start if start == end else f"{start} and later" if int(end) >= 2**31 - 1 else f"{start}-{end}"

    ranges = list(dict.fromkeys(span(m[2], m[3]) for m in found))
    said = f"its kernels' versions: {', '.join(ranges)}; the node's: {', '.join(sorted({m[1] for m in found}))}"
    before, after = text[:found[0].start()], text[found[-1].end():]
    wrapper = "Encountered following errors: ( "
    if before.endswith(wrapper) and after.startswith(" )"):
        before, after = before[:-len(wrapper)], after[2:]
    return before + said + after


def _numpy_dtype(ort_type: str) -> np.dtype | None:
    """`tensor(int64)` -> int64; None where NumPy has no such type (bfloat16) or it is not a tensor."""
    if not (ort_type.startswith("tensor(") and ort_type.endswith(")")):
        return None
    try:
        elem_type = onnx.TensorProto.DataType.Value(ort_type[len("tensor("):-1].upper())
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (ValueError, KeyError, TypeError):
        return None


def _session(source, options) -> "ort.InferenceSession":
    """An ONNX Runtime session; an op ONNX Runtime does not know is the user's to resolve.

    Decision: trtpipe runs the model on the CPU to measure activations and to validate;
    a custom op (a TensorRT plugin's domain, say) cannot run there. That is not a defect
    of trtpipe: say which op, and how to proceed without running it.
    """
    try:
        return cpu_session(source, options)
    except Exception as error:  # ORT raises its own pybind exception types
        text = " ".join(str(error).split())
        if "is not a registered function/op" in text or "No Op registered for" in text:
            op = text.split("Fatal error:")[-1].split(" is not")[0].strip() if "Fatal error:" in text else f"({text})"
            raise UserError(
                f"ONNX Runtime cannot run this model: op {op} is not registered (a custom op?)",
                "register its custom-op library with ONNX Runtime, or run without the model-running parts: "
                "precision.auto.max_abs=null and remove validate from stages",
            ) from None
        raise
