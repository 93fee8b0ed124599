"""Sweeps: real Hydra multirun with the joblib launcher, a shared cache, one summary."""

from __future__ import annotations

import csv
import json

import pytest

from tests.cli_helpers import run_trtpipe

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
    assert (tmp_path / "sweep" / "summary.md").read_text().startswith("| job |")


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
