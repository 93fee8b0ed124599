"""Child process: compile one ONNX model with the real TensorRT-RTX EP, ahead of time.

    python -m bench.rtx.compile_one MODEL OUT --target sm89 --standins DIR --wheel-home DIR
        [--shapes MIN OPT MAX]   (each "input:1x3x48x32,other:2x1x128", the EP's format)

Runs inside bench/rtx/sandbox.py's namespace (the fake GPU) with the stand-in CUDA
libraries (bench/rtx/standins.py) loaded first. Registers the plugin, compiles with
`onnxruntime.ModelCompiler` (provider options nv_target_sm, nv_detailed_build_log=1;
session option session.disable_cpu_ep_fallback=1, so a node the EP refuses fails the
compile instead of silently running on the CPU) and prints one JSON line on stdout:
{"ok", "seconds", "error", "out_bytes"}. The EP's log (the parser's per-node lines, the
builder's timings) goes to stderr, which the parent captures.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from pathlib import Path

from bench.rtx.standins import STAND_INS
from bench.rtx.wheel import PACKAGE

REGISTERED_NAME = "NvTensorRTRTXExecutionProvider"


def _load(standins: Path, wheel_home: Path):
    # The stand-ins are loaded first, by path and globally: the plugin's DT_NEEDED
    # (libcudart.so.12, libcuda.so.1, libnvidia-ml.so.1) then resolve to them by soname.
    for s in STAND_INS:
        ctypes.CDLL(str(standins / s.soname), mode=ctypes.RTLD_GLOBAL)
    sys.path.insert(0, str(wheel_home))
    import onnxruntime as ort
    plugin = __import__(PACKAGE)  # preloads the bundled TensorRT-RTX libraries
    ort.set_default_logger_severity(2)  # the detailed build log arrives as warnings
    ort.register_execution_provider_library(REGISTERED_NAME, plugin.get_library_path())
    return ort


def provider_options(target: str, shapes: list[str] | None) -> dict:
    """nv_target_sm, the detailed log, and the optimisation profile when one is given: without
    it the EP assumes "a single profile with fully dynamic range", whose kOPT values break
    shape constraints a real build (trtpipe's profiles) never meets."""
    options = {"nv_target_sm": target, "nv_detailed_build_log": "1"}
    if shapes:
        for key, value in zip(("min", "opt", "max"), shapes):
            options[f"nv_profile_{key}_shapes"] = value
    return options


def compile_model(model: Path, out: Path, target: str, standins: Path, wheel_home: Path,
                  shapes: list[str] | None = None) -> dict:
    ort = _load(standins, wheel_home)
    gpus = [d for d in ort.get_ep_devices()
            if d.ep_name != "CPUExecutionProvider" and d.device.type == ort.OrtHardwareDeviceType.GPU]
    if not gpus:
        return {"ok": False, "seconds": 0.0, "error": "the EP lists no GPU device (fake device not seen)"}
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices(gpus[:1], provider_options(target, shapes))
    start = time.perf_counter()
    try:
        compiler = ort.ModelCompiler(options, str(model), embed_compiled_data_into_model=True)
        compiler.compile_to_file(str(out))
    except Exception as exc:  # the EP's or ORT's refusal: reported, not raised
        return {"ok": False, "seconds": time.perf_counter() - start, "error": str(exc).strip()}
    return {"ok": True, "seconds": time.perf_counter() - start, "error": "",
            "out_bytes": out.stat().st_size}


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
