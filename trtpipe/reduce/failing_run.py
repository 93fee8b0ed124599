"""What a failing run directory says: the candidate and reference models, the sample inputs, and the
output and bound the emulated candidate broke.

Decisions:
- The models are the validate stage's own inputs, found by their digests among the earlier stages'
  recorded outputs (manifest.json), and read as validate read them.
- The sample inputs are made again from the validate stage's recorded `data` block (its cache
  material), exactly as the stage made them (`trtpipe.data.sample_feeds`): same seed, same files
  (a data.path file is checked against its recorded digest there).
- "Fails the same way" is the bound: the failing output's tolerance (the run's `validate.tolerance`
  and `validate.outputs`), and the first bound it broke in the order `validate` lists them
  (non-finite values first, then compare.BOUNDS), broken the same way: with non-finite values in
  the output when the run's output had some, with finite values only when it had none (an output
  off by 7% and one full of inf are different bugs: a window that overflows to inf does not
  reproduce a finite error, even though inf breaks the same bound). The input set is the first one
  on which the emulated output breaks that bound.
- Only the emulated candidate is reduced: it is what runs here (an engine needs its GPU).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from trtpipe.errors import UserError

NOT_A_RUN_FIX = "give trtpipe-reduce the run directory a failed trtpipe run printed (it holds manifest.json)"


@dataclass
class FailingRun:
    run_dir: Path
    reference: onnx.ModelProto
    candidate: onnx.ModelProto
    feeds: dict[str, np.ndarray]  # the input set on which the output breaks the bound
    output: str
    tolerance: object  # validate.compare.Tolerance of `output`
    bound: str  # the bound reduced for: "nonfinite", "rel_l2", "psnr_min", ...
    output_bounds: list[str]  # every bound the output broke on that input set
    origins: list[str]  # localisation's origins (candidate node names), for the report
    nonfinite: bool  # the run's output held inf/NaN where the reference is finite

    def fails_the_same_way(self, metrics) -> list[str] | None:
        """The bounds `metrics` break when they break `bound` the way the run's output did; else None."""
        broken = broken_bounds(metrics, self.tolerance)
        return broken if self.bound in broken and bool(metrics.nonfinite) == self.nonfinite else None


def broken_bounds(metrics, tolerance) -> list[str]:
    """The bounds `metrics` break, named as in validation.json; the rule of validate.compare.judge
    (a NaN metric caused by non-finite values counts as `nonfinite`, not as its own bound)."""
    from trtpipe.validate.compare import BOUNDS

    broken = [name for name, count in (("nonfinite", metrics.nonfinite),
                                       ("ref_nonfinite_mismatch", metrics.ref_nonfinite_mismatch)) if count]
    for metric, bound_name, upper in BOUNDS:
        bound, value = getattr(tolerance, bound_name), getattr(metrics, metric)
        if bound is None or value is None or (math.isnan(value) and metrics.nonfinite):
            continue
        if math.isnan(value) or (value > bound if upper else value < bound):
            broken.append(bound_name)
    return broken


def read_failing_run(run_dir: Path) -> FailingRun:
    from trtpipe.data import sample_feeds
    from trtpipe.numerics.emulator import EmulatedRunner
    from trtpipe.numerics.metrics import output_metrics
    from trtpipe.numerics.reference import ReferenceRunner
    from trtpipe.onnxmodel.onnx_io import load_model
    from trtpipe.runner.manifest_read import read_manifest
    from trtpipe.validate.compare import Tolerances

    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"{run_dir} is not a trtpipe run directory (no manifest.json in it)", NOT_A_RUN_FIX)
    manifest = read_manifest(manifest_path)
    validate = next((s for s in manifest["stages"] if s.get("name") == "validate"), None)
    report_path = _recorded_path(run_dir, validate, "report") if validate else None
    if validate is None or validate.get("status") not in ("failed", "ran", "cached") or report_path is None:
        raise UserError(f"run {run_dir} has no validation report to reduce (its validate stage did not run)",
                        NOT_A_RUN_FIX)
    report = json.loads(report_path.read_text())
    failing = next((c for c in report.get("candidates", []) if c["name"] == "emulated" and not c["passed"]), None)
    if failing is None:
        raise UserError(f"run {run_dir} did not fail validation on the emulated candidate: nothing to reduce",
                        NOT_A_RUN_FIX)
    material = validate["material"]
    config = material["config"]
    models = {kind: load_model(_path_of_digest(run_dir, manifest, digest), weights_on_disk=False)
              for kind, digest in material["inputs"].items() if kind in ("model", "reference")}
    tolerances = Tolerances.from_mapping(config["tolerance"], config.get("outputs") or {})
    all_feeds = sample_feeds(models["reference"], config["data"])
    reference_runner, candidate_runner = ReferenceRunner(models["reference"]), EmulatedRunner(models["model"])
    for feeds in all_feeds:
        reference, candidate = reference_runner.run(feeds), candidate_runner.run(feeds)
        for output in (value.name for value in models["model"].graph.output):
            if output not in reference or output not in candidate:
                continue
            tolerance = tolerances.for_output(output)
            metrics = output_metrics(reference[output], candidate[output])
            broken = broken_bounds(metrics, tolerance)
            if broken:
                origins = [o["node"] for o in (report.get("localization") or {}).get("origins") or []]
                return FailingRun(run_dir, models["reference"], models["model"], feeds, output, tolerance,
                                  broken[0], broken, origins, bool(metrics.nonfinite))
    raise UserError(f"run {run_dir}: no output of the emulated candidate breaks a bound when run again here",
                    "run trtpipe-verify on it: its files or the tools may have changed since")


def _recorded_path(run_dir: Path, stage: dict, kind: str) -> Path | None:
    entry = (stage.get("outputs") or {}).get(kind)
    return run_dir / entry["path"] if entry and (run_dir / entry["path"]).is_file() else None


def _path_of_digest(run_dir: Path, manifest: dict, digest: str) -> Path:
    """The file an earlier stage recorded with this sha256 (the validate stage's inputs are such files):
    in the run directory, or, for a model the run left in the cache (a failed run places no model,
    `run.artifacts=final` only the last: docs/cache.md), in the recorded cache's entry of that stage,
    checked against the sha256 before use."""
    for stage in manifest["stages"]:
        for entry in (stage.get("outputs") or {}).values():
            if entry.get("sha256") == digest and (run_dir / entry["path"]).is_file():
                return run_dir / entry["path"]
    from trtpipe.cache.recorded import artifact_in_recorded_cache

    found = artifact_in_recorded_cache(manifest, digest)
    if found is not None:
        return found
    raise UserError(f"run {run_dir} lacks the model file its validate stage read (sha256 {digest[:12]}…), "
                    "in its folder and in its recorded cache", "run trtpipe-verify on it, or run the pipeline again")
