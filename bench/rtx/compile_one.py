"""Child process: compile one ONNX model with the real TensorRT-RTX EP, ahead of time.

    python -m bench.rtx.compile_one MODEL OUT --target sm89 --standins DIR --wheel-home DIR
        [--shapes MIN OPT MAX]   (each "input:1x3x48x32,other:2x1x128", the EP's format)

Runs inside bench/rtx/sandbox.py's namespace (the fake GPU) with the stand-in CUDA
libraries (bench/rtx/standins.py) loaded first, then compiles with the same code as
trtpipe's tensorrt_rtx backend (trtpipe/trt/rtx/child.py: `onnxruntime.ModelCompiler`,
provider options nv_target_sm, nv_detailed_build_log=1; session option
session.disable_cpu_ep_fallback=1, so a node the EP refuses fails the compile instead of
silently running on the CPU) and prints one JSON line on stdout:
{"ok", "seconds", "error", "out_bytes"}. The EP's log (the parser's per-node lines, the
builder's timings) goes to stderr, which the parent captures.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

from bench.rtx.standins import STAND_INS
from trtpipe.trt.rtx.plugin import HOME_VARIABLE


def compile_model(model: Path, out: Path, target: str, standins: Path, wheel_home: Path,
                  shapes: list[str] | None = None) -> dict:
    """The product's own compile (trtpipe.trt.rtx.child), after the stand-ins are loaded."""
    _preload(standins, wheel_home)
    from trtpipe.trt.rtx.child import compile_model as compile_with_ep

    result = compile_with_ep(model, out, target, profile_options(shapes))
    error = result["error"] or result["problem"]
    status = {"ok": result["ok"], "seconds": result["seconds"], "error": error}
    if result["ok"]:
        status["out_bytes"] = out.stat().st_size
    return status


def load_with_standins(standins: Path, wheel_home: Path):
    """`onnxruntime` with the EP registered by the product's loader, the stand-ins loaded first
    (for bench/rtx/compile_many.py, which compiles many models in one process)."""
    _preload(standins, wheel_home)
    from trtpipe.trt.rtx.loader import load

    ort = load()
    ort.set_default_logger_severity(2)  # the detailed build log arrives as warnings
    return ort


def _preload(standins: Path, wheel_home: Path) -> None:
    """The stand-ins are loaded first, by path and globally: the plugin's DT_NEEDED (libcudart.so.12,
    libcuda.so.1, libnvidia-ml.so.1) then resolve to them by soname; the product's loader finds the
    wheel through $TRTPIPE_RTX_HOME."""
    for s in STAND_INS:
        ctypes.CDLL(str(standins / s.soname), mode=ctypes.RTLD_GLOBAL)
    os.environ[HOME_VARIABLE] = str(wheel_home)


def profile_options(shapes: list[str] | None) -> dict:
    """The optimisation profile when one is given: without it the EP assumes "a single profile
    with fully dynamic range", whose kOPT values break shape constraints a real build (trtpipe's
    profiles) never meets."""
    return dict(zip(("nv_profile_min_shapes", "nv_profile_opt_shapes", "nv_profile_max_shapes"), shapes or ()))


def provider_options(target: str, shapes: list[str] | None) -> dict:
    """What trtpipe.trt.rtx.child passes, for a caller that builds its own session."""
    return {"nv_target_sm": target, "nv_detailed_build_log": "1", **profile_options(shapes)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--target", default="sm89")
    parser.add_argument("--standins", type=Path, required=True)
    parser.add_argument("--wheel-home", type=Path, required=True)
    parser.add_argument("--shapes", nargs=3, metavar=("MIN", "OPT", "MAX"))
    args = parser.parse_args(argv)
    result = compile_model(args.model, args.out, args.target, args.standins, args.wheel_home, args.shapes)
    sys.stderr.flush()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
