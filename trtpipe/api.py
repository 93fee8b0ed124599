"""The Python API: compose and run a pipeline from the same override strings the
command line takes (recipes included), get a typed result, or a typed exception.

    import trtpipe.api as trtpipe
    result = trtpipe.run(["+recipe=transformer_fp16", "model.path=bert.onnx"])
    result.validation["passed"], result.artifact("precision", "plan")

Decisions:
- Importing this module has no side effects; Hydra's ConfigStore is filled on the
  first call.
- The API does not configure logging (a library must not): the run's `trtpipe.log`
  gets its INFO/DEBUG lines, the caller's handlers get what the caller's levels let
  through, and the caller's logging is as it was afterwards (runner/run_log.py).
- Two threads may call `run`: the second waits for the first (one run at a time per
  process: Hydra's compose state is process-wide). Run in parallel with processes.
- `hydra.*` overrides are refused (the run directory is the `run_dir=` argument).
- `run` raises `UserError` (nothing was run) or `PipelineFailed` (a stage or the
  validation failed; the result, manifest included, is attached).
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from trtpipe.errors import EXIT_OK, StageFailed, UserError
from trtpipe.runner.rundir import RunDirSnapshot, start_directory

__all__ = ["RunResult", "StageResult", "PipelineFailed", "UserError", "compose", "run", "execute"]

log = logging.getLogger("trtpipe")

# Decision: a second thread calling `run` waits for the first to finish. Hydra's compose
# uses a process-wide GlobalHydra, and the run's log file hangs on the process-wide
# `trtpipe` logger, so two runs at once would fail to compose or mix their logs.
# Reentrant, so `execute` may take it too; for parallel runs use processes.
_RUN_LOCK = threading.RLock()


@dataclass(frozen=True)
class StageResult:
    name: str
    status: str
    key: str | None
    seconds: float
    outputs: dict[str, Path]
    summary: str
    reason: str | None
    error: str | None
    origin: str | None = None  # "local" or "remote" (cache.remote): where its artifacts came from


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    exit_code: int
    stages: list[StageResult]
    validation: dict | None
    manifest: dict

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def artifact(self, stage: str, kind: str = "model") -> Path:
        """The file of a stage's output, wherever this run left it: in the run directory, or, for a
        model a failed run or `run.artifacts=final` did not place there (the manifest's
        `left_in_cache`), the read-only file of its cache entry, checked against the recorded sha256.
        KeyError: the stage produced no such output; FileNotFoundError: the file is in neither place
        (the cache entry pruned or cleared since)."""
        for result in self.stages:
            if result.name == stage and kind in result.outputs:
                placed = result.outputs[kind]
                if placed.is_file():
                    return placed
                from trtpipe.cache.recorded import artifact_in_recorded_cache

                recorded = next(s for s in self.manifest["stages"] if s["name"] == stage)["outputs"][kind]
                cached = artifact_in_recorded_cache(self.manifest, recorded["sha256"])
                if cached is not None:
                    return cached
                raise FileNotFoundError(
                    f"stage {stage!r}'s {kind} ({recorded['path']}) is neither in {self.run_dir} nor in the cache "
                    "any more (pruned or cleared); run the same overrides again to rebuild it (stages still "
                    "cached are reused)")
        raise KeyError(f"stage {stage!r} produced no {kind!r} in this run")


class PipelineFailed(StageFailed):
    """A stage failed or validation rejected a candidate; `result` has the details."""

    def __init__(self, result: RunResult, message: str) -> None:
        super().__init__(message)
        self.result = result


def compose(overrides: Sequence[str] = ()):
    """The composed, checked config (a DictConfig) for these overrides; UserError if invalid."""
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.preflight import compose_checked
    from trtpipe.config.store import register_configs

    start_directory()  # Hydra records the working directory: a deleted one is a UserError, not a traceback
    with _RUN_LOCK:
        register_configs()
        return compose_checked(conf_dir(), list(overrides))


def run(overrides: Sequence[str] = (), *, run_dir: Path | None = None, start_dir: Path | None = None) -> RunResult:
    """Compose and run; the run directory defaults to `outputs/<date>/<time>` under `start_dir`.

    Thread-safe by waiting: one run at a time per process (see `_RUN_LOCK`).
    """
    from trtpipe.runner.run_log import run_log

    _refuse_hydra_overrides(overrides)
    start = Path(start_dir or start_directory()).resolve()
    with _RUN_LOCK:
        cfg = compose(overrides)
        if run_dir is None:
            now = _dt.datetime.now()
            run_dir = start / "outputs" / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S-%f")
        run_dir = Path(run_dir).resolve()
        before = RunDirSnapshot.take(run_dir)  # a user error later removes only what this run adds
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_log(run_dir / "trtpipe.log"):
            return execute(cfg, run_dir, start, list(overrides), before=before)


def _refuse_hydra_overrides(overrides: Sequence[str]) -> None:
    """Decision: `hydra.*` overrides (and `hydra/` groups) are refused, not ignored: the API
    composes without Hydra's app, so none of them would take effect; the run directory
    is the `run_dir=` argument."""
    for override in overrides:
        key = str(override).lstrip("+~").split("=", 1)[0].strip()
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            fix = ("pass run_dir=Path(...) to trtpipe.api.run instead" if key in ("hydra.run.dir", "hydra.sweep.dir")
                   else "drop it: the Python API does not run Hydra's app (the run directory is run_dir=)")
            raise UserError(f"override {override!r}: {key} is a Hydra setting the Python API does not use", fix)


def execute(cfg, run_dir: Path, start_dir: Path, overrides: list[str],
            before: "RunDirSnapshot | None" = None) -> RunResult:
    """Run a composed config into `run_dir`: the one path both the API and the CLI take.

    `before`: what `run_dir` held before the run (runner/rundir.py); a user error removes
    only what the run added. Without it nothing is removed."""
    with _RUN_LOCK:
        return _execute(cfg, run_dir, start_dir, overrides, before)


def _execute(cfg, run_dir: Path, start_dir: Path, overrides: list[str], before) -> RunResult:
    from trtpipe.config.check import check_config
    from trtpipe.config.ignored_settings import warn_ignored_settings
    from trtpipe.config.search_inherit import inherit_search_tolerances
    from trtpipe.runner.pipeline import run_pipeline

    try:
        check_config(cfg, overrides)
        inherited = inherit_search_tolerances(cfg)  # a bound set for the search alone keeps validate's others
        if inherited:
            log.debug("precision search: %s taken from validate (not set for the search)",
                      ", ".join(key.rsplit(".", 1)[-1] for key in inherited))
        warn_ignored_settings(cfg, overrides)  # settings of a stage not in `stages`: one warning line
        outcome = run_pipeline(cfg, run_dir, start_dir, overrides)
    except UserError:
        (before or RunDirSnapshot.untouchable(run_dir)).remove_new()
        raise
    result = _result(outcome, run_dir)
    if not result.ok:
        raise PipelineFailed(result, str(outcome.error) if outcome.error else "the pipeline failed")
    return result


def _result(outcome, run_dir: Path) -> RunResult:
    import json

    manifest = outcome.manifest.to_json()
    stages = [
        StageResult(s["name"], s["status"], s["key"], s["seconds"],
                    {kind: run_dir / o["path"] for kind, o in s["outputs"].items()},
                    s["summary"], s["reason"], s["error"], s.get("origin"))
        for s in manifest["stages"]
    ]
    validation = None
    for stage in stages:
        if "report" in stage.outputs:
            validation = json.loads(stage.outputs["report"].read_text())
    return RunResult(run_dir, outcome.exit_code, stages, validation, manifest)
