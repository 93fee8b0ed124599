"""What each job of a sweep did, for the summary: a record per job in the sweep root, and the
list of jobs the sweep was to run.

Decisions:
- A job writes `<sweep dir>/.trtpipe-jobs/<num>.json` when it starts (`running`, with its
  host and pid) and again when it ends (its status, exit code and one-line reason). The
  record lives outside the job's run directory: a job stopped by a user error removes what
  it wrote there (runner/rundir.py), and its record must stay. It is a file, not a return
  value, so it works for jobs in other processes or on other hosts (joblib, submitit).
- A record still `running` once the launcher is done means the job's process ended without
  a word: killed (kill -9, the OOM killer, a crash), or stopped with an interrupted sweep.
- The launching process knows the jobs a sweep was to run only for Hydra's basic sweeper
  (the cartesian product of the swept values, numbered in order, as it launches them);
  a job of that list with neither a record nor a run directory never started.
- Ctrl-C (or SIGTERM) in the launching process writes `.trtpipe-jobs/interrupted`; a job
  that starts after it (a launcher may already have handed it to a worker) records
  `not run` and runs nothing. So does one that starts after `.trtpipe-jobs/stopped`, written
  when the launcher stopped the sweep (a worker died).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

from trtpipe.cache.files import write_atomic

log = logging.getLogger("trtpipe")

RECORDS = ".trtpipe-jobs"
INTERRUPTED = "interrupted"
STOPPED = "stopped"

# Exit codes to status words (the job's own end); see errors.py and runner/interrupt.py.
STATUS_OF_CODE = {0: "ok", 1: "failed", 2: "user_error", 130: "interrupted", 143: "interrupted"}


def write_record(sweep_dir: Path, job: int, record: dict) -> None:
    """Best effort: a record that cannot be written must not fail the job (the summary then
    says the job left no record)."""
    path = Path(sweep_dir) / RECORDS / f"{job}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"job": job, **record}, sort_keys=True).encode())
    except OSError as error:
        log.debug("the sweep record %s could not be written: %s", path, error)


def job_started(sweep_dir: Path, job: int, overrides: list[str], run_dir: Path) -> dict:
    record = {"overrides": overrides, "run_dir": str(run_dir), "status": "running",
              "host": socket.gethostname(), "pid": os.getpid(), "started": round(time.time(), 3)}
    write_record(sweep_dir, job, record)
    return record


def job_ended(sweep_dir: Path, record: dict, job: int, code: int | None, reason: str | None,
              status: str | None = None, manifest: bool = False) -> None:
    """`manifest`: the job wrote its manifest (a stage ran); the summary then reads it (a user
    error inside a stage is exit 2 with a manifest, status `failed`)."""
    if status is None and manifest:  # the run's own status, as its manifest says
        status = "ok" if code == 0 else "interrupted" if code > 128 else "failed"
    elif status is None:
        status = STATUS_OF_CODE.get(code, "failed")
    write_record(sweep_dir, job, {**record, "status": status, "exit_code": code,
                                  "reason": one_line(reason) if reason else None})


def read_records(sweep_dir: Path) -> dict[int, dict]:
    records = {}
    for path in sorted((Path(sweep_dir) / RECORDS).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            records[int(record["job"])] = record
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged record: the job is then reported from its run directory
    return records


def mark_interrupted(sweep_dir: Path, signum: int) -> None:
    try:
        (Path(sweep_dir) / RECORDS).mkdir(parents=True, exist_ok=True)
        (Path(sweep_dir) / RECORDS / INTERRUPTED).write_text(f"{signum}\n")
    except OSError as error:
        log.debug("the sweep's interrupt mark could not be written: %s", error)


def mark_stopped(sweep_dir: Path) -> None:
    """The launcher stopped the sweep (a worker died): a job a launcher starts afterwards runs
    nothing (Ray may start a queued job on the freed worker while the summary is written)."""
    try:
        (Path(sweep_dir) / RECORDS).mkdir(parents=True, exist_ok=True)
        (Path(sweep_dir) / RECORDS / STOPPED).write_text("launcher\n")
    except OSError as error:
        log.debug("the sweep's stop mark could not be written: %s", error)


def interrupted_by(sweep_dir: Path) -> int | None:
    """The signal that interrupted the sweep, None if it was not."""
    try:
        return int((Path(sweep_dir) / RECORDS / INTERRUPTED).read_text().strip())
    except (OSError, ValueError):
        return None


class SweepJob:
    """One job of a sweep, in the process that runs it: its record from start to end."""

    def __init__(self, sweep_dir: Path, number: int, record: dict) -> None:
        self.sweep_dir, self.number, self.record = sweep_dir, number, record

    @classmethod
    def of(cls, hydra_cfg, start_dir: Path, run_dir: Path, signalled: int | None = None) -> "SweepJob":
        """From Hydra's config of the job (a job may have changed directory: the sweep
        directory is taken from the start directory). `signalled`: the signal this job's process
        got before the job started (the launching process marks the sweep too, maybe later)."""
        sweep_dir = Path(start_dir) / str(hydra_cfg.sweep.dir)
        number = int(hydra_cfg.job.num)
        if signalled is not None:
            mark_interrupted(sweep_dir, signalled)
        job = cls(sweep_dir, number, {})
        if not job.sweep_was_interrupted():
            job.record = job_started(sweep_dir, number, list(hydra_cfg.overrides.task), run_dir)
        else:
            why = "interrupted" if interrupted_by(sweep_dir) is not None else "stopped by its launcher"
            job.record = {"overrides": list(hydra_cfg.overrides.task), "run_dir": str(run_dir)}
            job_ended(sweep_dir, job.record, number, None, f"not started: the sweep was {why}",
                      status="not run")
        return job

    def sweep_was_interrupted(self) -> bool:
        """Interrupted (a signal), or stopped by its launcher (`mark_stopped`): no job starts work."""
        return interrupted_by(self.sweep_dir) is not None or (self.sweep_dir / RECORDS / STOPPED).exists()

    def ended(self, code: int, reason: str | None, manifest: bool) -> None:
        job_ended(self.sweep_dir, self.record, self.number, code, reason, manifest=manifest)


def expected_jobs(config) -> list[list[str]] | None:
    """The override lists of the jobs, numbered from 0, as Hydra's basic sweeper launches them;
    None for another sweeper or when they cannot be worked out here."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return None
        params = [f"{key}={value}" for key, value in (config.hydra.sweeper.get("params") or {}).items()]
        overrides = params + list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
        parsed = OverridesParser.create(config_loader=_config_loader()).parse_overrides(overrides)
        return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]
    except Exception as error:  # a sweep syntax only Hydra's config repository can expand: records only
        log.debug("the sweep's job list is not known in advance: %s", error)
        return None


def _config_loader():
    from hydra.core.global_hydra import GlobalHydra

    instance = GlobalHydra.instance()
    return instance.config_loader() if instance.is_initialized() else None


def one_line(text: str) -> str:
    return " ".join(str(text).split())
