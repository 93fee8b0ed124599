"""A sweep the launcher stops (a joblib worker killed) exits with the stop's code even when no job
row carries it: the worker was killed between jobs, after its own job had ended, and loky then
cancelled the jobs not yet started (issue 22 item 12; found by the 1,000-case sweep fuzz run,
where such a sweep exited 1 and the user error of a job it never started was unseen).

Exercises the command line's `_run_sweep` with the exception loky raises, in process, over a real
sweep folder holding the records jobs write (runner/sweep_jobs.py)."""

from __future__ import annotations

import pytest

from trtpipe.cli import _run_sweep
from trtpipe.runner.sweep_jobs import job_ended, job_started
from trtpipe.runner.sweep_summary import SweepSummary

LOKY_KILLED = ("A worker process managed by the executor was unexpectedly terminated. This could be caused by "
               "a segmentation fault while calling the function or by an excessive memory usage causing the "
               "Operating System to kill the worker.\n\nThe exit codes of the workers are {SIGKILL(-9)}")


class TerminatedWorkerError(Exception):  # loky's class is private; the message is what is read
    pass


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    root = tmp_path / "sweep"
    monkeypatch.setattr(SweepSummary, "sweep_dir", root)
    monkeypatch.setattr(SweepSummary, "expected", [["model.path=a.onnx"], ["model.path=b.onnx"],
                                                   ["model.path=missing.onnx"]])
    monkeypatch.setattr(SweepSummary, "last_exit_code", 0)
    monkeypatch.setattr(SweepSummary, "quiet", True)
    for job in (0, 1):  # both ended ok before a worker was killed
        record = job_started(root, job, SweepSummary.expected[job], root / str(job))
        job_ended(root, record, job, 0, None)
    return root


def test_a_worker_killed_between_jobs_ends_the_sweep_137_with_every_job_listed(sweep, capsys):
    def launcher():
        raise TerminatedWorkerError(LOKY_KILLED)

    _run_sweep(launcher)

    assert SweepSummary.last_exit_code == 137
    err = capsys.readouterr().err
    assert err.startswith("trtpipe: the sweep stopped: a worker of the sweep was killed by SIGKILL"), err
    summary = (sweep / "summary.md").read_text()
    assert "| 2 | model.path=missing.onnx | not run |" in summary, summary


def test_a_launcher_stop_without_a_signal_is_exit_1(sweep, capsys):
    def launcher():
        raise RuntimeError("the pool broke")

    _run_sweep(launcher)

    assert SweepSummary.last_exit_code == 1
    assert "RuntimeError: the pool broke" in capsys.readouterr().err
