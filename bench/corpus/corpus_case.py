"""One corpus model through sanitize -> upgrade_opset -> precision -> validate, classified.

Outcomes (`outcome`, with a `category` that says which kind):
- `passed`: every stage ran, every output loads and passes the full ONNX
  checker, sanitize and upgrade_opset kept the numbers (ONNX Runtime, the
  test's own inputs) and the FP16 candidate ran in the emulator. Categories:
  `fp16 accurate`, `fp16 inaccurate` (FP16 fails the default tolerances: an
  expected property of some ops, not a defect), `nothing to convert` (no
  node planned FP16), plus `numerics unchecked (...)` when the original
  cannot be compared (random ops, ONNX Runtime cannot run it).
- `rejected`: a stage raised trtpipe's `UserError` with a one-line message.
- `skipped`: ONNX Runtime cannot run the *original* model (an op or type it
  does not implement) and trtpipe said so in a `UserError`: nothing any stage
  of trtpipe could do about it.
- `defect`: anything else: an exception that is not a `UserError`, a
  `UserError` that is not one line, a stage output that no longer loads or
  passes the checker (when the original did), a stage output ONNX Runtime can
  no longer run (when it ran the original), a numeric change by sanitize or
  upgrade_opset, an emulator that fails where the reference ran, a hang
  (judged by the pool, see `corpus_pool.py`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
import time
import traceback
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx

from bench.corpus.corpus_data import CaseRef, case_feeds
from bench.corpus.corpus_values import mismatch, ort_run, same_runs

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
MAX_MESSAGE_CHARS = 600
ORT_REFUSAL = re.compile(r"ONNX Runtime [\d.]+ cannot (load|run) the model|ONNX Runtime cannot run this model")


class Finding(Exception):
    """Ends a case early with its classification."""

    def __init__(self, outcome: str, category: str, stage: str, message: str = "") -> None:
        super().__init__(message)
        self.record = {"outcome": outcome, "category": category, "stage": stage, "message": message}


def classify(case: CaseRef, work_root: str | None = None) -> dict:
    """The classification record of one case (never raises). Warnings and log records below
    ERROR are silenced while it runs (the stages' notes on odd test models would flood the run)."""
    start, logging_disabled = time.perf_counter(), logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory(dir=work_root, prefix="corpus_") as tmp:
            warnings.simplefilter("ignore")
            record = _classify(case, Path(tmp))
    except Finding as finding:
        record = finding.record
    except Exception as error:  # a bug of this harness, shown as such
        record = {"outcome": "defect", "category": "harness error", "stage": "harness",
                  "message": _describe(error) + " | " + traceback.format_exc(limit=-3).replace("\n", " ")}
    finally:
        logging.disable(logging_disabled)
    return {"name": case.name, "kind": case.kind, **record, "seconds": round(time.perf_counter() - start, 3)}


def _classify(case: CaseRef, tmp: Path) -> dict:
    original = onnx.load(case.model)
    feeds = case_feeds(case, original)
    reference, ort_error, deterministic = _run_original(case.model, feeds)
    original_valid = _checker_error(case.model) is None
    model = Path(case.model)
    for stage, run in (("sanitize", _sanitize), ("upgrade_opset", _upgrade)):
        output = tmp / f"{stage}.onnx"
        _guard(stage, ort_error, lambda: run(model, output))
        _check_output(stage, output, original_valid)
        if reference is not None:
            got = _stage_run(stage, output, feeds)
            reason = mismatch(reference, got) if deterministic else None
            if reason:
                raise Finding("defect", f"numeric mismatch after {stage}", stage, reason)
        model = output
    data = _data_block(feeds, tmp)
    precision_dir = tmp / "precision"
    precision_dir.mkdir()
    outcome = _guard("precision", ort_error, lambda: _precision(model, data, precision_dir))
    candidate = precision_dir / outcome.outputs["model"]
    _check_output("precision", candidate, original_valid)
    verdict = _guard("validate", ort_error, lambda: _validate(model, candidate, data),
                     emulator_ran_reference=reference is not None)
    planned = json.loads((precision_dir / "precision_plan.json").read_text())["totals"]["nodes"]
    category = "fp16 accurate" if verdict.passed else "fp16 inaccurate"
    if not planned.get("fp16"):
        category = "nothing to convert"
    if reference is None:
        category += f" (numerics unchecked: ONNX Runtime cannot run the original: {ort_error})"
    elif not deterministic:
        category += " (numerics unchecked: outputs are random)"
    return {"outcome": "passed", "category": category, "stage": "", "message": ""}


def _run_original(path: str, feeds: dict):
    try:
        first = ort_run(path, feeds)
        second = ort_run(path, feeds)
    except Exception as error:  # ONNX Runtime's own exception types
        return None, _describe(error, with_type=False)[:160], False
    return first, None, same_runs(first, second)


def _guard(stage: str, ort_error: str | None, action, emulator_ran_reference: bool = False):
    """Run one stage; a UserError is a rejection (or an ORT skip), anything else a defect."""
    from trtpipe.errors import UserError

    try:
        return action()
    except UserError as error:
        message = str(error)
        if "\n" in message or len(message) > MAX_MESSAGE_CHARS:
            raise Finding("defect", "unclear UserError (not one short line)", stage, message) from None
        if ORT_REFUSAL.search(message):
            if ort_error is None:
                raise Finding("defect", "UserError blames ONNX Runtime for a model it runs", stage, message) from None
            raise Finding("skipped", "ONNX Runtime cannot run the original", stage, message) from None
        raise Finding("rejected", _pattern(message), stage, message) from None
    except Finding:
        raise
    except Exception as error:
        kind = type(error).__name__
        if emulator_ran_reference and "onnxruntime" in type(error).__module__:
            kind = "emulator failed where the reference ran: " + kind
        raise Finding("defect", f"{kind}: {_pattern(str(error))}", stage, _describe(error)) from None


def _check_output(stage: str, path: Path, original_valid: bool) -> None:
    error = _checker_error(str(path))
    if error and original_valid:
        raise Finding("defect", f"invalid model after {stage}: {_pattern(error)}", stage, error)


def _checker_error(path: str) -> str | None:
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    except Exception as error:  # ValidationError, InferenceError, DecodeError
        return _describe(error)
    return None


def _stage_run(stage: str, path: Path, feeds: dict) -> dict:
    try:
        return ort_run(str(path), feeds)
    except Exception as error:
        raise Finding("defect", f"ONNX Runtime cannot run the output of {stage} (it ran the original): "
                      f"{_pattern(_describe(error, with_type=False))}", stage, _describe(error)) from None


def _sanitize(src: Path, dst: Path) -> None:
    from trtpipe.graph.sanitize import sanitize_model

    sanitize_model(src, dst, **_shipped_defaults()["sanitize"])


def _upgrade(src: Path, dst: Path) -> None:
    from trtpipe.graph.upgrade import upgrade_model

    upgrade_model(src, dst, **upgrade_defaults())


def _precision(model: Path, data: dict, out_dir: Path):
    from trtpipe.stages.precision import PlanPrecision

    return PlanPrecision().run({"model": model}, {**precision_defaults(), "data": data}, out_dir)


def _validate(reference_path: Path, candidate_path: Path, data: dict):
    """What the validate stage does for the emulated candidate (without writing its report)."""
    from trtpipe.data import sample_feeds
    from trtpipe.onnxmodel.onnx_io import load_model
    from trtpipe.validate.compare import Tolerances, compare_candidate
    from trtpipe.numerics.emulator import EmulatedRunner
    from trtpipe.numerics.reference import ReferenceRunner

    reference_model, candidate_model = load_model(reference_path), load_model(candidate_path)
    feeds = sample_feeds(reference_model, data)
    reference = ReferenceRunner(reference_model)
    reference_runs = [reference.run(f) for f in feeds]
    emulated = EmulatedRunner(candidate_model)
    runs = [emulated.run(f) for f in feeds]
    outputs = [value.name for value in candidate_model.graph.output]
    config = _shipped_defaults()["validate"]
    tolerances = Tolerances.from_mapping(config["tolerance"], config["outputs"])
    return compare_candidate("emulated", reference_runs, runs, outputs, tolerances)


def _data_block(feeds: dict, tmp: Path) -> dict:
    """The resolved `data` block for the test's own inputs: an .npz of its tensor inputs, written
    as trtpipe documents (raw bits for bfloat16/float8/int4, fixed-width text for strings)."""
    from trtpipe.numerics.input_types import is_raw_stored

    arrays = {}
    for name, value in feeds.items():
        if isinstance(value, np.ndarray):
            if is_raw_stored(value.dtype):
                value = value.view(f"u{value.dtype.itemsize}")
            elif value.dtype == object:
                value = value.astype(str)
            arrays[name] = value
    path = tmp / "inputs.npz"
    np.savez(path, **arrays)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"seed": 0, "iterations": 1, "inputs": {}, "path": str(path), "sha256": digest}


@lru_cache(maxsize=None)
def _shipped_defaults() -> dict:
    """The shipped stage defaults (conf/), read without Hydra; interpolations resolved."""
    from omegaconf import OmegaConf

    nodes = {}
    for stage in ("sanitize", "upgrade_opset", "precision", "validate"):
        node = OmegaConf.load(CONF_DIR / stage / "default.yaml")
        node.pop("defaults", None)
        nodes[stage] = node
    return OmegaConf.to_container(OmegaConf.create(nodes), resolve=True)


def precision_defaults() -> dict:
    return _shipped_defaults()["precision"]


def upgrade_defaults() -> dict:
    config = _shipped_defaults()["upgrade_opset"]
    return {"target_opset": config["target"], "fuse_layernorm": config["fuse_layernorm"]}


def _describe(error: BaseException, with_type: bool = True) -> str:
    text = " ".join(str(error).split())[:300] or "(no message)"
    return f"{type(error).__name__}: {text}" if with_type else text


def _pattern(message: str) -> str:
    """The message with names and numbers blanked, so defects of one class group together."""
    text = re.sub(r"(?<![\w.])/[^\s'\"]+", "<path>", message)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return " ".join(text.split())[:140]
