"""Ctrl-C at the two edges of a run (issue 22 item 14, found by the 1,000-case sweep fuzz run):
before a joblib worker's first job, and after the command has decided its outcome.

Real commands in subprocesses, real loky workers, real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.test_sweep import summary_rows

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

# An exit hook that sends the process SIGINT: a Ctrl-C arriving while the interpreter shuts down,
# after trtpipe printed its last line and chose its exit code. Registered before trtpipe is
# imported, so it runs after trtpipe's and the libraries' own exit hooks (atexit is last in, first out).
LATE_CTRL_C = """
import atexit, os, signal, sys
atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
from trtpipe.cli import main
sys.argv = ["trtpipe", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "joblib_sweep"])
def test_a_ctrl_c_after_the_outcome_is_decided_changes_nothing(tmp_path, sweep):
    """Reproduced: the handler raised Interrupted inside an exit hook: 'Exception ignored in
    atexit callback' and a traceback on stderr after a successful run (the fuzz run also saw exit
    0 with loky's thread join interrupted, and death by SIGINT once finalization had restored the
    default handler)."""
    where = (["-m", "sanitize.toposort=true,false", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
              f"hydra.sweep.dir={tmp_path / 'sweep'}"] if sweep else [f"hydra.run.dir={tmp_path / 'run'}"])
    done = subprocess.run([sys.executable, "-c", LATE_CTRL_C, *where, "stages=[sanitize]"], cwd=tmp_path,
                          env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


HANGING_SHUTDOWN = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon: the shutdown waits for it
from trtpipe.cli import main
sys.argv = ["trtpipe", *sys.argv[1:]]
main()
"""


def test_a_ctrl_c_during_a_hanging_shutdown_ends_the_process_with_the_outcomes_code(tmp_path):
    """Once the outcome is decided, a shutdown that hangs (here a thread the exit waits for) still
    ends on Ctrl-C, with the outcome's exit code (0), no traceback. Reproduced: with the signals
    simply ignored after the outcome, Ctrl-C did nothing and only SIGKILL ended it."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-c", HANGING_SHUTDOWN, "stages=[sanitize]", f"hydra.run.dir={run_dir}"],
                               cwd=tmp_path, env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.time() + 120
    while not any(line.startswith("trtpipe: ok") for line in lines):  # its last line: the outcome is decided
        assert time.time() < deadline and process.poll() is None, "".join(lines)
        time.sleep(0.05)
    time.sleep(1.0)  # from its last line to the exit waiting for the thread
    assert process.poll() is None, "".join(lines)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("Ctrl-C did not end a shutdown that hangs") from None
    reader.join(timeout=5)
    output = "".join(lines)
    assert process.returncode == 0, output
    assert "Traceback" not in output and "Exception ignored" not in output, output


def _loky_workers(pid: int) -> list[int]:
    """The loky worker processes started by `pid` (children running loky's popen module)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    found = []
    for child in children:
        try:
            if b"loky" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("delay", [0.15, 0.4])  # inside the worker's imports (~1 s here)
def test_a_ctrl_c_while_joblib_workers_start_ends_the_sweep_130_with_every_job_accounted(tmp_path, delay):
    """Reproduced: a worker had Python's default SIGINT handler from its start until trtpipe's task
    ran in it (its imports, Hydra composing the job's config there): Ctrl-C in that second gave a
    KeyboardInterrupt traceback from the worker, or Hydra's ConfigCompositionException, and exit 0
    or 2. Now loky starts workers with SIGINT blocked (runner/interrupt.py); a worker's first job
    sees the pending Ctrl-C and runs nothing."""
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trtpipe", "-m", "+recipe=fp32", "stages=[sanitize]", "data.seed=1,2,3",
         "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep"], cwd=tmp_path,
        env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while not _loky_workers(sweep.pid):
        assert time.time() < deadline and sweep.poll() is None, sweep.communicate()
        time.sleep(0.002)
    time.sleep(delay)
    os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group, workers included
    stdout, stderr = sweep.communicate(timeout=120)

    assert sweep.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr
    rows = summary_rows(tmp_path / "sweep")
    assert [row["job"] for row in rows] == ["0", "1", "2"], rows
    assert {row["status"] for row in rows} <= {"not run", "interrupted"}, rows
    assert not any((tmp_path / "sweep" / job / "manifest.json").exists() for job in "012")


def test_the_loky_hook_is_where_trtpipe_expects_it(monkeypatch):
    """The guard above relies on loky looking up `fork_exec` in its module at each worker start;
    a joblib release that moves it would silently drop the guard, so this fails instead."""
    import inspect

    from joblib.externals.loky.backend import fork_exec as loky_fork_exec
    from joblib.externals.loky.backend import popen_loky_posix

    from trtpipe.runner.interrupt import launcher_workers_start_with_sigint_blocked

    monkeypatch.setattr(loky_fork_exec, "fork_exec", loky_fork_exec.fork_exec)  # restored after the test
    assert "from .fork_exec import fork_exec" in inspect.getsource(popen_loky_posix.Popen._launch)
    launcher_workers_start_with_sigint_blocked()
    assert loky_fork_exec.fork_exec.blocks_sigint
