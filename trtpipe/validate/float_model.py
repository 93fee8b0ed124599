"""`validate.float_model`: the unquantized model, so a quantized model's report says what
quantization costs and what FP16 adds (issue 31, item 4).

The verdict's reference is the model validate is given: for a Q/DQ model that is the quantized
model itself, its QuantizeLinear/DequantizeLinear run as fake-quant in the reference and the
candidate alike. So the verdict measures what FP16 adds to the quantized model, never what
quantization costs. With the float model (the one the quantizer started from), validate also runs it
on the same inputs and compares against it (the float model is also the anchor of the verdict, anchored.py):
- the reference (the QDQ model) against the float model: what quantization costs;
- each candidate against the float model: quantization and FP16 together.
When the two numbers are close, FP16 adds almost nothing to what quantization already cost.

Decisions (each with its reason):
- The float model is checked before any stage (the runner calls `checked_float_model`): a missing
  file, a file that is not ONNX, or inputs/outputs other than the model's (names and element
  types) are exit 2 in one line; comparing outputs of another model would be numbers about nothing.
  Only the graph is read there (no weights).
- Its content is part of validate's key (its sha256: `ValidateAccuracy.key_files`), so a re-exported
  float model at the same path re-runs validate.
- A relative path is the start directory's, as `model.path` is (the run does not change directory).
- Compared are the model's own outputs that the float model has (promoted intermediates are
  trtpipe's, not the float model's).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trtpipe.errors import UserError

if TYPE_CHECKING:  # imported where a model is read: validate's key_files (every run) needs only the path
    import onnx

KEY = "validate.float_model"
FIX = (f"point {KEY} at the unquantized ONNX model this one was quantized from, or leave it out: "
       f"{KEY}=null")
REFERENCE_NOTE = ("the reference is the model as given to validate, its Q/DQ included (fake-quant in the reference "
                  "and the candidate alike): the verdict measures what FP16 adds to the quantized model, not what "
                  "quantization costs")
ANCHORED_NOTE = ("the reference is the model as given to validate, its Q/DQ included (fake-quant in the reference and "
                 "the candidate alike); the verdict is anchored on {anchor}: a candidate passes when, against the "
                 "anchor, it is within the QDQ model's own distance widened by the bounds (triangle inequality), or "
                 "within the bounds of the QDQ model (criterion below)")


def reference_note(anchor, quantized: bool = False) -> str:
    """What the reference is and, for an anchored verdict (validate/anchored.py), what the anchor is; for a
    quantized model without one (no activation Q/DQ pair to remove), how to get one."""
    from trtpipe.validate.anchor_model import FLOAT_MODEL

    if anchor is None:
        return REFERENCE_NOTE + (f"; no activation QuantizeLinear/DequantizeLinear pair to derive an anchor from: "
                                 f"{KEY}=PATH (the unquantized model) anchors the verdict on it" if quantized else "")
    if anchor.source == FLOAT_MODEL:
        return ANCHORED_NOTE.format(anchor=f"the float model ({KEY})")
    return ANCHORED_NOTE.format(anchor=f"the QDQ model without its activations' rounding (derived; {KEY}=PATH "
                                       "anchors it on the unquantized model)")


def float_model_path(text: str | None, start_dir: Path | None = None) -> Path | None:
    """The configured path as an absolute path (relative to `start_dir`, else the current directory)."""
    if not text:
        return None
    path = Path(str(text)).expanduser()
    if path.is_absolute():
        return path
    return (start_dir / path) if start_dir is not None else path.absolute()


def checked_float_model(text: str | None, model_path: Path, start_dir: Path) -> Path | None:
    """The float model's absolute path after the checks of the module docstring; `UserError` (exit 2)
    naming `validate.float_model` otherwise. None when it is not set."""
    from trtpipe.onnxmodel.onnx_io import load_model

    path = float_model_path(text, start_dir)
    if path is None:
        return None
    try:
        float_model = load_model(path, load_external_data=False)
    except UserError as error:
        raise UserError(f"{KEY}: {error.problem}", FIX) from None
    model = load_model(model_path, load_external_data=False)
    difference = interface_difference(model, float_model)
    if difference:
        raise UserError(f"{KEY} {path} is not the unquantized form of the model: {difference}", FIX)
    return path.resolve()


def interface_difference(model: onnx.ModelProto, float_model: onnx.ModelProto) -> str | None:
    """What differs between the two models' inputs and outputs (names, element types), or None."""
    for kind in ("input", "output"):
        ours, theirs = _interface(model, kind), _interface(float_model, kind)
        if ours == theirs:
            continue
        if set(ours) != set(theirs):
            return f"its {kind}s are {sorted(theirs)}, the model's {sorted(ours)}"
        name = next(name for name in ours if ours[name] != theirs[name])
        return (f"its {kind} {name!r} is {_type_name(theirs[name])}, the model's is {_type_name(ours[name])}")
    return None


def float_comparisons(float_runs: list[dict], reference_runs: list[dict], candidate_runs: dict[str, list[dict]],
                      outputs: list[str], compare) -> list:
    """The comparisons against the float model, reported (the verdict is anchored.py's): the reference (what
    quantization costs), then each candidate (quantization and FP16). `compare(name, float_runs, runs,
    outputs)` is the validate stage's comparator; the verdicts' `passed` means nothing here and is not reported."""
    compared = [name for name in outputs if all(name in run for run in float_runs)]
    verdicts = [("reference", "what quantization costs (the QDQ model vs the float model)",
                 compare("reference", float_runs, reference_runs, compared))]
    verdicts += [(name, "quantization and FP16 together (the candidate vs the float model)",
                  compare(name, float_runs, runs, compared)) for name, runs in candidate_runs.items()]
    return [{"name": name, "measures": measures,
             "outputs": {output: entry for output, entry in verdict.to_json()["outputs"].items()}}
            for name, measures, verdict in verdicts]


def _interface(model: onnx.ModelProto, kind: str) -> dict[str, int]:
    graph = model.graph
    values = graph.input if kind == "input" else graph.output
    initializers = {tensor.name for tensor in graph.initializer} if kind == "input" else set()
    return {value.name: value.type.tensor_type.elem_type for value in values if value.name not in initializers}


def _type_name(elem_type: int) -> str:
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)
