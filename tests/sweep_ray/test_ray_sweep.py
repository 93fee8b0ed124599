"""Sweeps on a Ray cluster (issue 34 item 3): `trtpipe -m ... hydra/launcher=ray` against a local Ray
head (ray_head.py) with the remote cache on a real S3 server, both on 127.0.0.1. The jobs run in
Ray's workers, which the raylet started in another directory with another environment: each job's
run directory, its cache and its S3 endpoint must still be the sweep's (trtpipe/sweep_launch.py).
Ctrl-C and a killed worker end as they do with joblib (tests/test_sweep.py).

Marked `ray`: CI runs them (the test extra brings the ray extra); `pytest -m "not ray"` skips them."""

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

from tests.cache_remote.s3_server import BUCKET, new_prefix
from tests.test_crash_and_concurrency import large_model

pytestmark = pytest.mark.ray

# 8 jobs: two recipes x four sample seeds on the small built-in model (fp32 passes; naive_fp16 is
# judged by validation, whichever way it goes, and must say so in its row).
SWEEP = ("+recipe=fp32,naive_fp16", "model.builtin=mixed_precision", "data.seed=1,2,3,4")
STAGES = ["sanitize", "upgrade_opset", "precision", "build", "validate"]


def start_sweep(work: Path, ray_head, s3, cache: str, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, **s3.env(), **ray_head.driver_env(), "TRTPIPE_CACHE": cache}
    env.pop("TRTPIPE_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "trtpipe", "-m", *overrides, "hydra/launcher=ray",
                             "hydra.sweep.dir=sweep"], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_sweep(work: Path, ray_head, s3, cache: str, *overrides: str) -> tuple[int, str, str]:
    process = start_sweep(work, ray_head, s3, cache, *overrides)
    stdout, stderr = process.communicate(timeout=600)
    return process.returncode, stdout, stderr


def rows_of(sweep: Path) -> list[dict]:
    with open(sweep / "summary.csv") as handle:
        return list(csv.DictReader(handle))


def manifests(sweep: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sweep.glob("*/manifest.json")}


def test_a_ray_sweep_of_eight_jobs_fills_the_remote_and_a_second_sweep_is_cached(tmp_path, ray_head, s3):
    url = f"s3://{BUCKET}/{new_prefix()}"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    code, stdout, stderr = run_sweep(first, ray_head, s3, "cache", *SWEEP, f"cache.remote={url}")

    rows = rows_of(first / "sweep")
    assert [row["job"] for row in rows] == [str(n) for n in range(8)], stdout + stderr
    assert all(row["status"] in ("ok", "failed") and row["validation"] in ("passed", "FAILED") for row in rows), rows
    assert code == (1 if any(row["status"] == "failed" for row in rows) else 0), stdout + stderr
    assert "Traceback" not in stderr, stderr
    summary = (first / "sweep" / "summary.md").read_text()
    for row in rows:  # each job's line in summary.md carries its verdict
        assert any(line.startswith(f"| {row['job']} |") and f"| {row['validation']} |" in line
                   for line in summary.splitlines()), (row, summary)
    found = manifests(first / "sweep")
    # The jobs' run directories are the sweep's (not under the directory `ray start` ran in), their
    # cache is the sweep's TRTPIPE_CACHE, and their S3 endpoint the sweep's AWS_ENDPOINT_URL: the Ray
    # head has neither, so an upload proves the endpoint came from the sweep's process.
    assert sorted(found, key=int) == [str(n) for n in range(8)]
    assert {m["config"]["cache"]["dir"] for m in found.values()} == {str(first / "cache")}
    assert not list(ray_head.temp_dir.glob("**/manifest.json"))
    uploads = [s["remote"]["upload"] for m in found.values() for s in m["stages"] if s["remote"]]  # where a stage ran
    assert uploads and set(uploads) == {"uploaded"}, uploads
    objects = s3.objects(url.removeprefix(f"s3://{BUCKET}/") + "/")
    assert {name.split("/")[-2] for name in objects if "/entries/" in name} == set(STAGES)

    # Another machine: an empty local cache, the same bucket. Nothing runs again.
    code2, stdout2, stderr2 = run_sweep(second, ray_head, s3, "cache", *SWEEP, f"cache.remote={url}")
    assert code2 == code, stdout2 + stderr2
    again = manifests(second / "sweep")
    assert len(again) == 8
    stages = [s for m in again.values() for s in m["stages"]]
    # A GPU-less build is deferred, from the cache too; a validation that failed fails again from the cache.
    assert all(s["status"] in ("cached", "deferred") or (s["status"] == "failed" and s["name"] == "validate" and
                                                          "downloaded" in s["remote"]) for s in stages), stages
    assert any(s["origin"] == "remote" for m in again.values() for s in m["stages"])
    assert [(r["job"], r["validation"]) for r in rows_of(second / "sweep")] == [(r["job"], r["validation"])
                                                                                   for r in rows]


def _first_log_with(sweep: Path, text: str, process: subprocess.Popen) -> Path:
    deadline = time.time() + 180
    while True:
        for log in sweep.glob("*/trtpipe.log"):
            if text in log.read_text():
                return log
        assert time.time() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.01)


def _process_writing(path: Path) -> int:
    from tests.test_sweep import _process_writing as writer

    return writer(path)


def _big_sweep(tmp_path: Path, ray_head, s3) -> subprocess.Popen:
    """4 jobs of a model whose sanitize takes seconds, on a cluster of 2 CPUs: 2 run, 2 wait."""
    large_model(tmp_path / "big.onnx")
    return start_sweep(tmp_path, ray_head, s3, str(tmp_path / "cache"), "model.path=big.onnx", "stages=[sanitize]",
                       "sanitize.fold_constants=false,true", "data.seed=1,2")


def test_ctrl_c_on_a_ray_sweep_interrupts_its_jobs_and_accounts_for_all(tmp_path, ray_head, s3):
    """Ctrl-C reaches the sweep's process only (Ray's workers are not in the terminal's process
    group): the running jobs must stop all the same, and no job start after the signal."""
    sweep = _big_sweep(tmp_path, ray_head, s3)
    _first_log_with(tmp_path / "sweep", "sanitize        running", sweep)
    os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the sweep's process group
    signalled = time.time()
    stdout, stderr = sweep.communicate(timeout=180)

    assert sweep.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert "trtpipe: interrupted" in stderr.splitlines(), stderr
    rows = rows_of(tmp_path / "sweep")
    assert [row["job"] for row in rows] == ["0", "1", "2", "3"], rows
    assert {row["status"] for row in rows} <= {"interrupted", "not run", "ok"}, rows
    assert "interrupted" in {row["status"] for row in rows}, rows  # a job that was running stopped
    for manifest in manifests(tmp_path / "sweep").values():  # whole, and saying what happened
        assert manifest["status"] in ("ok", "interrupted"), manifest["status"]
    logs = sorted((tmp_path / "sweep").glob("*/trtpipe.log"))
    late = [log for log in logs if "running..." in log.read_text() and
            min(p.stat().st_mtime for p in log.parent.joinpath(".hydra").iterdir()) > signalled]
    assert late == [], late  # no job ran a stage after the signal


def test_a_killed_ray_worker_is_reported_and_the_summary_written(tmp_path, ray_head, s3):
    """Ray retried a job whose worker died (up to 3 times) and says nothing of the signal; trtpipe
    asks for no retry and ends as with joblib: one line, 137, the job `killed` in the summary."""
    sweep = _big_sweep(tmp_path, ray_head, s3)
    log = _first_log_with(tmp_path / "sweep", "sanitize        running", sweep)
    os.kill(_process_writing(log), signal.SIGKILL)
    stdout, stderr = sweep.communicate(timeout=180)

    assert sweep.returncode == 128 + signal.SIGKILL, stdout + stderr
    assert "Traceback" not in stderr, stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("trtpipe: the sweep stopped: ")]
    assert "a Ray worker of the sweep died while it ran a job" in line, line
    rows = rows_of(tmp_path / "sweep")
    assert [row["job"] for row in rows] == ["0", "1", "2", "3"], rows
    killed = rows[int(log.parent.name)]
    assert killed["status"] == "killed" and killed["exit_code"] == "137" and "Ray worker" in killed["reason"], killed
    assert {row["status"] for row in rows} <= {"killed", "ok", "not run"}, rows
    for manifest in manifests(tmp_path / "sweep").values():
        assert manifest["status"] == "ok", manifest["status"]
