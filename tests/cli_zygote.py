"""A warm start for the suite's `python -m trtpipe` processes: fork them from a process that has
already imported what every run imports.

Why: the suite runs the real command line some hundreds of times, and each `python -m trtpipe`
paid the interpreter start and the imports of trtpipe, Hydra, ONNX, ONNX Runtime and numpy
(about 0.6 s of CPU before any stage) — on 2 cores a large share of the suite's time.

How: one "zygote" process per test process (each xdist worker), started on first use from a
neutral folder, imports those modules and waits. For each run it forks a child that becomes
`python -m trtpipe ARGS` as a fresh process would be: the run's working directory, environment
and argv, stdin from /dev/null, stdout and stderr into files, `runpy` running trtpipe's
`__main__`, then the interpreter's own ending (non-daemon threads joined, `atexit` hooks run,
streams flushed) and the exit code (a signal's death as -N, like subprocess). The zygote waits
for it and reports the code. Still a separate process with its own signals, files and exit:
only the imports are shared, and nothing has run in the zygote that a run could inherit.

Decision: the plain subprocess is kept wherever the warm start could differ from a cold one:
- a `preexec_fn`, or an environment that changes an interpreter setting read only at start
  (any `PYTHON*` variable: the hash seed, the path, -X options; the locale: the streams' encoding);
- two runs at once from one test process (threads): the zygote serves one at a time;
- `TRTPIPE_COLD_START=1` (or the zygote failing to start): every run is a fresh interpreter,
  to check that the warm start changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What the zygote imports: what `python -m trtpipe` imports before and during a run (the stage
# modules, ONNX Runtime for validate, matplotlib's figure for the accuracy plot). Never a module
# with import-time side effects on the process (pyplot, a logging configuration).
_WARM = ("trtpipe.cli", "trtpipe.app", "trtpipe.api", "trtpipe.single_run", "trtpipe.config.check",
         "trtpipe.config.preflight", "trtpipe.config.store", "trtpipe.runner.console", "trtpipe.runner.sweep_summary",
         "trtpipe.runner.pipeline", "multiprocessing", "filelock", "trtpipe.stages.sanitize",
         "trtpipe.stages.upgrade_opset", "trtpipe.stages.precision", "trtpipe.stages.promote_outputs",
         "trtpipe.stages.build", "trtpipe.stages.validate", "hydra", "omegaconf", "onnx", "numpy",
         "onnxruntime", "matplotlib.figure", "matplotlib.backends.backend_agg")

_ZYGOTE = r'''
import importlib, json, os, select, signal, sys
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:  # a module this install lacks: the child imports it (or fails) as a cold run would
        pass
requests, replies = sys.stdin.buffer, sys.stdout.buffer
replies.write(b"ready\n"); replies.flush()

def become_the_run(request):
    import atexit, runpy, threading
    os.chdir(request["cwd"])
    os.environ.clear(); os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600); os.dup2(out, fd); os.close(out)
    sys.argv = ["-m", *request["args"]]
    code = 0
    try:
        runpy.run_module("trtpipe", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info()); code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr); code = 1
    try:
        threading._shutdown()      # as the interpreter ends: non-daemon threads joined,
        atexit._run_exitfuncs()    # then the atexit hooks
    except BaseException:
        sys.excepthook(*sys.exc_info())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if code < 0:                   # died by a signal, as a cold interpreter does
        signal.signal(-code, signal.SIG_DFL); os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)

for line in requests:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            become_the_run(request)
        finally:
            os._exit(70)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], request["timeout"])
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    replies.write(json.dumps({"code": code, "timed_out": not ready}).encode() + b"\n"); replies.flush()
'''


class _Zygote:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.failed = False

    def start(self) -> bool:
        if self.process is not None and self.process.poll() is None:
            return True
        if self.failed:
            return False
        neutral = tempfile.mkdtemp(prefix="trtpipe-zygote-")  # never the checkout: the installed package
        self.process = subprocess.Popen([sys.executable, "-c", _ZYGOTE, json.dumps(_WARM)], cwd=neutral,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.process.stdout.readline() != b"ready\n":
            self.failed, self.process = True, None
            return False
        return True

    def run(self, args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess | None:
        """The completed run, or None when this run must take the cold path (see the module doc)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if not self.start():
                return None
            with tempfile.TemporaryDirectory(prefix="trtpipe-run-") as streams:
                out, err = Path(streams) / "stdout", Path(streams) / "stderr"
                request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err),
                           "timeout": timeout}
                self.process.stdin.write(json.dumps(request).encode() + b"\n")
                self.process.stdin.flush()
                reply = json.loads(self.process.stdout.readline())
                stdout, stderr = (path.read_text(errors="replace") if path.exists() else "" for path in (out, err))
            if reply["timed_out"]:
                raise subprocess.TimeoutExpired([sys.executable, "-m", "trtpipe", *args], timeout, stdout, stderr)
            return subprocess.CompletedProcess([sys.executable, "-m", "trtpipe", *args], reply["code"], stdout, stderr)
        finally:
            self.lock.release()


_ZYGOTE_OF_THIS_PROCESS = _Zygote()
# Environment variables an interpreter reads only as it starts (the streams' encoding from the locale).
_READ_AT_START = ("PYTHON", "LANG", "LC_ALL", "LC_CTYPE")


def warm_trtpipe(args: list[str], cwd: Path, env: dict, timeout: float,
                 preexec_fn=None) -> subprocess.CompletedProcess:
    """`python -m trtpipe ARGS` in `cwd` with `env`, captured as text: forked warm where that
    cannot differ from a cold start, a fresh interpreter otherwise (module doc)."""
    cold = (preexec_fn is not None or os.environ.get("TRTPIPE_COLD_START") == "1"
            or any(key.startswith(_READ_AT_START) and env.get(key) != os.environ.get(key)
                   for key in {*env, *os.environ}))
    done = None if cold else _ZYGOTE_OF_THIS_PROCESS.run(list(args), cwd, env, timeout)
    if done is None:
        done = subprocess.run([sys.executable, "-m", "trtpipe", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, preexec_fn=preexec_fn)
    return done
