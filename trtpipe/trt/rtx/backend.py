"""The build stage's side of TensorRT-RTX: is a device there, the cache-key facts, the build.

Decisions:
- Whether the EP is installed costs a file lookup; whether it loads and lists a device costs
  one child process (`child probe`, about 0.5 s), memoised per process and EP folder: a run asks once.
- Key facts: the EP's and TensorRT-RTX's versions (files of the wheel), the target
  architecture, and whether a device was visible. Not the GPU itself: the engine is built
  ahead of time for `nv_target_sm`, the same on any machine; but a deferral cached where no
  device was visible must not be reused where one is.
- The build is a child process (`child compile`); its stderr is the build log.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from trtpipe.trt.rtx import plugin
from trtpipe.trt.seam import Availability

CHILD = "trtpipe.trt.rtx.child"
PROBE_FIX = f"where `python -m {CHILD} probe` lists a device (it prints the EP's own output)"


@dataclass(frozen=True)
class RtxBuild:
    ok: bool
    seconds: float
    log: str               # the EP's log: the parser's per-node lines, the builder's timings
    error: str = ""        # ORT's/the EP's exception text when not ok
    problem: str = ""      # set when the EP could not be used at all (then `fix` too)
    fix: str = ""


def _child_env() -> dict[str, str]:
    """The child imports this trtpipe (the same checkout or install as the parent)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _run_child(args: list[str], timeout: float | None = None) -> tuple[dict, str, int]:
    done = subprocess.run([sys.executable, "-m", CHILD, *args], capture_output=True, text=True,
                          env=_child_env(), timeout=timeout)
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value, done.stderr, done.returncode
    return {}, done.stderr, done.returncode


def availability() -> Availability:
    """Installed, loadable, and at least one GPU device offered by the EP. Never raises."""
    folder = plugin.package_dir()
    if folder is None:
        from trtpipe.trt.rtx.loader import RTX_MACHINE

        return Availability(False, plugin.not_installed(), RTX_MACHINE)
    return _probed(folder)


@functools.lru_cache(maxsize=4)
def _probed(folder: Path) -> Availability:
    """The child's answer for the EP in `folder`, once per process and folder."""
    try:
        result, stderr, code = _run_child(["probe"], timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Availability(False, f"the TensorRT-RTX probe did not answer ({error})", PROBE_FIX)
    if not result:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return Availability(False, f"the TensorRT-RTX probe failed (exit {code}: {tail[:200]})", PROBE_FIX)
    if not result["ok"]:
        return Availability(False, result["problem"], result["fix"])
    if not result["devices"]:
        from trtpipe.trt.rtx.loader import NO_DEVICE, NO_DEVICE_FIX

        return Availability(False, NO_DEVICE, NO_DEVICE_FIX)
    return Availability(True)


def key_facts(target_sm: str) -> dict:
    folder = plugin.package_dir()
    return {"backend": "tensorrt_rtx", "ep": plugin.ep_version(folder),
            "tensorrt_rtx": plugin.tensorrt_rtx_version(folder), "target_sm": target_sm,
            "device_visible": availability().available}


def build(model: Path, out: Path, target_sm: str, options: dict[str, str]) -> RtxBuild:
    """Compile `model` into the EPContext model `out` (the engine embedded)."""
    args = ["compile", str(model), str(out), "--target", target_sm]
    for key, value in sorted(options.items()):
        args += ["--option", f"{key}={value}"]
    result, stderr, code = _run_child(args)
    if not result:  # the child died (a crash inside the EP): its stderr says where
        return RtxBuild(False, 0.0, stderr, error=f"the TensorRT-RTX build process ended with exit {code}")
    return RtxBuild(result["ok"], result["seconds"], stderr, error=result.get("error", ""),
                    problem=result.get("problem", ""), fix=result.get("fix", ""))
