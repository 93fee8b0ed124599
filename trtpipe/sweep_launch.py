"""Sweeps on Ray (`hydra/launcher=ray`, Hydra's hydra-ray-launcher plugin, the `ray` extra): what a
job needs from the launching process when a Ray worker runs it.

A Ray worker is started by the raylet of its node, not by `trtpipe`: it does not inherit the
launching process's working directory, environment, or terminal (its process group), as joblib's
and submitit's workers do. Decisions, each applied only when `hydra/launcher=ray` is on the
command line (`ray_overrides`, `job_environment`, `ray_job_signals`):
- The sweep directory is taken from the directory the sweep starts in: a relative
  `hydra.sweep.dir` (and the default `outputs/multirun/...`) is prefixed with that directory,
  quoted. Hydra makes each job's directory absolute inside the job's process, and a Ray worker's
  current directory is the one `ray start` ran in: the jobs' run directories landed there, away
  from summary.md. (`${hydra:runtime.cwd}` cannot be the prefix: the launching process resolves
  the sweep directory before Hydra's config is set there.) A start directory whose name has a
  quote, a backslash or a `$` is left alone (Hydra would read them as syntax): then give an
  absolute `hydra.sweep.dir`.
- The environment variables that say where the cache is and how to reach the remote tier
  (`FORWARDED`: TRTPIPE_CACHE, pinned absolute, and AWS's endpoint, region, profile and config
  files) travel with the job (in the task function's closure) and are set in the worker for the
  job's duration, then restored (a worker runs job after job). A Ray job otherwise resolved
  `cache.dir` from the worker's own environment: the user cache directory of whoever ran `ray
  start`, a cold cache away from the one the sweep named. Credentials (AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) are never copied into a cluster's task arguments: a
  Ray node uses its own (an instance role, the environment `ray start` ran with); without any, the
  remote tier says so in one warning line and the job builds with its local cache.
- `+hydra.launcher.ray.init.object_store_memory=null` when the sweep joins a running cluster
  (`hydra.launcher.ray.init.address` set, or RAY_ADDRESS): hydra-ray-launcher 1.2.2 passes
  `object_store_memory` to `ray.init` always (a CI workaround of its own), and Ray refuses it for
  an existing cluster ("When connecting to an existing cluster, object_store_memory must not be
  provided", Hydra issue 2893, fixed upstream after 1.2.2).
- `++hydra.launcher.ray.remote.max_retries=0`: a job whose worker died (kill -9, the out-of-memory
  killer) is reported `killed` and ends the sweep with 137, as with joblib; Ray's default retried
  it up to 3 times, and a job the OOM killer stopped is stopped again.
- `++hydra.launcher.ray.init.log_to_driver=false` with `--json` or `--quiet`: Ray copies a
  worker's output to the launching process's stdout with a `(_run_job pid=...)` prefix, which
  would break stdout's one-line contract; each job's lines stay in its trtpipe.log.
- Ctrl-C reaches the launching process only (Ray's workers are not in the terminal's process
  group). It marks the sweep interrupted (runner/sweep_summary.py); a Ray job watches that mark
  (`ray_job_signals`) and interrupts itself as a Ctrl-C would, so it ends with its manifest
  `interrupted` and its cache entries whole; the launching process waits for the jobs still
  running (at most `SETTLE_SECONDS`) before it writes summary.md, since Ray kills a departed
  driver's workers.
Each setting the user gives on the command line wins: nothing is added for a key already there.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from trtpipe.cache.cache_home import CACHE_ENV

RAY_LAUNCHER = "hydra/launcher=ray"
FORWARDED = (CACHE_ENV, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION",
             "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE",
             "AWS_EC2_METADATA_DISABLED")
SWEEP_DIR = "hydra.sweep.dir="
DEFAULT_SWEEP_DIR = "outputs/multirun/${now:%Y-%m-%d}/${now:%H-%M-%S-%f}"  # conf/config.yaml's
SETTLE_SECONDS = 60.0  # how long the launching process waits for interrupted jobs to end
POLL_SECONDS = 0.1  # how often a Ray job looks for the sweep's interrupt mark


def uses_ray(argv: list[str]) -> bool:
    return RAY_LAUNCHER in argv


def ray_overrides(argv: list[str], start: Path, quiet_stdout: bool) -> list[str]:
    """argv with the overrides a Ray sweep needs (module docstring); argv itself for other launchers."""
    if not uses_ray(argv):
        return argv
    given = {arg.lstrip("+~").split("=", 1)[0] for arg in argv if "=" in arg}
    out = [_absolute_sweep_dir(arg, start) if arg.startswith(SWEEP_DIR) else arg for arg in argv]
    if "hydra.sweep.dir" not in given:
        out.append(_absolute_sweep_dir(SWEEP_DIR + DEFAULT_SWEEP_DIR, start))
    joins = [arg.split("=", 1)[1] for arg in argv if arg.lstrip("+").startswith("hydra.launcher.ray.init.address=")]
    if (joins and joins[-1] not in ("", "null")) or (not joins and os.environ.get("RAY_ADDRESS")):
        _add(out, given, "hydra.launcher.ray.init.object_store_memory", "null")
    _add(out, given, "hydra.launcher.ray.remote.max_retries", "0")
    if quiet_stdout:
        _add(out, given, "hydra.launcher.ray.init.log_to_driver", "false")
    return out


def _add(argv: list[str], given: set[str], key: str, value: str) -> None:
    if key not in given:
        argv.append(f"++{key}={value}")


def _absolute_sweep_dir(arg: str, start: Path) -> str:
    value = arg[len(SWEEP_DIR):]
    if not value or value[0] in "/~$'\"" or set("'\\$") & set(str(start)):  # as typed (module docstring)
        return arg
    return f"{SWEEP_DIR}'{start}/{value}'"


def launch_environment(argv: list[str]) -> dict[str, str]:
    """The FORWARDED variables set in the launching process, for a Ray sweep's jobs ({} otherwise)."""
    if not uses_ray(argv):
        return {}
    return {name: os.environ[name] for name in FORWARDED if os.environ.get(name)}


@contextmanager
def job_environment(environment: dict[str, str]):
    """The launching process's FORWARDED values, set for one job and restored after it."""
    previous = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def ray_job_signals(sweep_dir: Path, enabled: bool):
    """In a Ray worker: for the job's duration, trtpipe's SIGINT/SIGTERM handlers, and a thread that
    runs the handler of the sweep's signal in the main thread once the sweep is marked interrupted
    (the launching process got the Ctrl-C, this worker did not): `_thread.interrupt_main`, not a
    signal sent with kill, since a Ray worker's main thread blocks SIGINT (its mask, seen in 2.60).
    Ray's own handlers come back after."""
    from trtpipe.runner.interrupt import install_signal_handlers
    from trtpipe.runner.sweep_jobs import interrupted_by

    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    install_signal_handlers()
    done, deciding = threading.Event(), threading.Lock()  # no signal once the job has ended

    def watch() -> None:
        while not done.wait(POLL_SECONDS):
            signum = interrupted_by(sweep_dir)
            with deciding:
                if signum is not None and not done.is_set():
                    _thread.interrupt_main(signum)  # not a real signal: Ray's workers block SIGINT
                    return

    watcher = threading.Thread(target=watch, name="trtpipe-sweep-interrupt", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with deciding:
            done.set()
        watcher.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def settle(sweep_dir: Path | None, seconds: float = SETTLE_SECONDS) -> None:
    """In the launching process of an interrupted Ray sweep: wait until no job's record says
    `running` (each ends with its manifest once it sees the mark), at most `seconds`."""
    import time

    from trtpipe.runner.sweep_jobs import read_records

    if sweep_dir is None:
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(record.get("status") == "running" for record in read_records(sweep_dir).values()):
            return
        time.sleep(POLL_SECONDS)
