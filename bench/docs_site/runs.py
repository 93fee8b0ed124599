"""The real trtpipe runs the manual's pictures come from, each in a fresh folder and cache.

Decision: the command line (`python -m trtpipe ...`, the interpreter running this script) rather
than the Python API: the pictures are what a user who types the command gets, run directory and
all. A fresh cache per call keeps a developer's warm entries out of it; the built-in models make
the runs need no file and no network (a few seconds each on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# name -> (overrides, exit code the run must end with): the failing run is the failure trtpipe
# exists to catch (everything FP16, no protective rule: NAFNet's LayerNorm variance overflows);
# the passing one is the recipe made for that architecture, drawing its picture although it passes.
RUNS = {
    "failing": (["+recipe=naive_fp16", "model.builtin=nafnet"], 1),
    "passing": (["+recipe=nafnet_fp16", "model.builtin=nafnet", "validate.plot_passed=true"], 0),
}


class RunFailed(RuntimeError):
    pass


def run(name: str, work: Path) -> Path:
    """Run `RUNS[name]` under `work`; the run directory, checked to have ended as it must."""
    overrides, expected = RUNS[name]
    run_dir = work / name
    env = {**os.environ, "TRTPIPE_CACHE": str(work / "cache")}
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "trtpipe", *overrides, f"hydra.run.dir={run_dir}"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != expected:
        raise RunFailed(f"trtpipe {' '.join(overrides)} exited {done.returncode}, expected {expected}:\n"
                        f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return run_dir


def command(name: str) -> str:
    return "trtpipe " + " ".join(RUNS[name][0])
