"""Sweeps: real Hydra multirun with the joblib launcher, a shared cache, one summary."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe
from tests.test_crash_and_concurrency import large_model

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")


def test_parallel_sweep_shares_stages_and_writes_one_summary(tmp_path):
    run = run_trtpipe(tmp_path, "-m", "+recipe=transformer_fp16", "precision.auto.max_abs=256,4096",
                      "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep")
    assert run.code == 0, run.stdout + run.stderr
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/manifest.json"))]
    assert len(manifests) == 2
    for shared in ("sanitize", "upgrade_opset"):
        statuses = sorted(next(s["status"] for s in m["stages"] if s["name"] == shared) for m in manifests)
        assert statuses == ["cached", "ran"], (shared, statuses)  # computed once across the parallel jobs
    with open(tmp_path / "sweep" / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["job"] for row in rows] == ["0", "1"]
    assert all(row["validation"] == "passed" and row["fp32_nodes"].isdigit() for row in rows)
    assert "precision.auto.max_abs=256" in rows[0]["overrides"]
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    assert summary.startswith("Every job: `+recipe=transformer_fp16`\n\n| job |"), summary  # said once


def test_a_failing_job_makes_the_sweep_exit_non_zero(tmp_path):
    run = run_trtpipe(tmp_path, "-m", "+recipe=fp32,naive_fp16", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                      "hydra.sweep.dir=sweep")
    assert run.code == 1, run.stdout + run.stderr
    rows = list(csv.DictReader(open(tmp_path / "sweep" / "summary.csv")))
    assert sorted(row["validation"] for row in rows) == ["FAILED", "passed"]


def test_submitit_local_launcher_runs_the_sweep(tmp_path):
    """The SLURM launcher's local mode: jobs in separate processes, same cache, same summary."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    run = run_trtpipe(tmp_path, "-m", "+recipe=nafnet_fp16", "precision.auto.max_abs=256,4096",
                      "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", "hydra.sweep.dir=sweep")
    assert run.code == 0, run.stdout + run.stderr
    rows = list(csv.DictReader(open(tmp_path / "sweep" / "summary.csv")))
    assert len(rows) == 2 and {row["validation"] for row in rows} == {"passed"}


def test_relative_trtpipe_cache_is_resolved_once_from_the_start_directory(tmp_path):
    """Issue 22 item 15. Reproduced: with hydra.job.chdir=true each job resolved a relative
    TRTPIPE_CACHE inside its own run directory (a cold cache per job, none where the user asked)."""
    run = run_trtpipe(tmp_path, "-m", "stages=[sanitize]", "data.seed=1,2", "hydra.job.chdir=true",
                      "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep",
                      env={"TRTPIPE_CACHE": "relcache"})
    assert run.code == 0, run.stdout + run.stderr
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/manifest.json"))]
    assert [m["config"]["cache"]["dir"] for m in manifests] == [str(tmp_path / "relcache")] * 2
    assert sorted(m["stages"][0]["status"] for m in manifests) == ["cached", "ran"]
    assert list((tmp_path / "relcache" / "entries" / "sanitize").iterdir())
    assert not list((tmp_path / "sweep").glob("*/relcache"))


def summary_rows(sweep: Path) -> list[dict]:
    with open(sweep / "summary.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("launcher", ["joblib", "basic"])
def test_a_job_stopped_by_a_user_error_is_in_the_summary_and_the_exit_code(tmp_path, launcher):
    """Issue 22 item 4. Reproduced: with the joblib launcher a sweep with a job stopped by a user
    error exited 0 and summary.md left that job out (it read only */manifest.json, which such a
    job never writes); with the basic launcher the exit code was 2 but the job was missing too."""
    run = run_trtpipe(tmp_path, "-m", "model.builtin=mixed_precision", "stages=[sanitize]",
                      "model.path=/nonexistent.onnx,null", f"hydra/launcher={launcher}",
                      *(["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []), "hydra.sweep.dir=sweep")
    assert run.code == 2, run.stdout + run.stderr
    rows = summary_rows(tmp_path / "sweep")
    assert [(row["job"], row["status"], row["exit_code"]) for row in rows] == [("0", "user_error", "2"),
                                                                               ("1", "ok", "0")]
    assert "model file /nonexistent.onnx does not exist" in rows[0]["reason"]
    assert "model.path=/nonexistent.onnx" in rows[0]["overrides"]
    assert "| user_error | 2 | model file /nonexistent.onnx does not exist" in (tmp_path / "sweep" / "summary.md").read_text()


def _process_writing(path: Path) -> int:
    """The pid of the process that has `path` open (a job's log: the worker running that job)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process has {path} open")


def _wait_for_line(path: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while not (path.exists() and text in path.read_text()):
        assert time.time() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.01)


def test_a_killed_joblib_worker_is_reported_and_the_summary_written(tmp_path):
    """Issue 22 item 12. Reproduced: kill -9 of a joblib worker ended the sweep in a full Python
    traceback from main (loky's TerminatedWorkerError), exit 1, and no summary."""
    large_model(tmp_path / "big.onnx")
    env = {**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trtpipe", "-m", "model.path=big.onnx", "stages=[sanitize]",
         "sanitize.fold_constants=false,true", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         "hydra.sweep.dir=sweep"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "sweep" / "0" / "trtpipe.log"
    _wait_for_line(log, "sanitize        running", sweep)
    os.kill(_process_writing(log), signal.SIGKILL)
    stdout, stderr = sweep.communicate(timeout=120)

    assert sweep.returncode == 128 + signal.SIGKILL, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("trtpipe: the sweep stopped: a worker of the sweep was "
                                                      "killed by SIGKILL"), stderr
    rows = summary_rows(tmp_path / "sweep")
    assert [row["job"] for row in rows] == ["0", "1"]
    assert rows[0]["status"] == "killed" and "SIGKILL" in rows[0]["reason"], rows[0]
    assert all(row["status"] in ("killed", "ok") for row in rows), rows


def test_ctrl_c_on_a_joblib_sweep_starts_no_job_after_the_signal_and_accounts_for_all(tmp_path):
    """Issue 22 item 14. Reproduced: after Ctrl-C the sweep wrote no summary (the launcher's abort
    skips on_multirun_end), and a job handed to a worker could still start after the signal."""
    env = {**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trtpipe", "-m", "+recipe=fp32", "data.seed=1,2,3", "hydra/launcher=joblib",
         "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for_line(tmp_path / "sweep" / "0" / "trtpipe.log", "running", sweep)
    os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    signalled = time.time()
    stdout, stderr = sweep.communicate(timeout=120)
    time.sleep(3)  # a straggling worker would start its next job by now

    assert sweep.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    rows = summary_rows(tmp_path / "sweep")
    assert [row["job"] for row in rows] == ["0", "1", "2"], rows
    # Job 2 waits for a free worker: normally it never starts ("not run"). On a loaded machine job 0
    # may finish, and job 2 start, before this test sees job 0's first line: then job 2 started before
    # the signal, which `late` below checks (no job ran a stage after it).
    assert rows[2]["status"] != "not run" or "interrupted" in rows[2]["reason"], rows[2]
    assert {row["status"] for row in rows} <= {"interrupted", "not run", "ok"}, rows
    logs = sorted((tmp_path / "sweep").glob("*/trtpipe.log"))
    late = [log for log in logs if "running..." in log.read_text() and
            min(p.stat().st_mtime for p in log.parent.joinpath(".hydra").iterdir()) > signalled]
    assert late == [], late  # no job ran a stage after the signal
