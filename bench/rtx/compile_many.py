"""Child process: compile many small ONNX models with the real TensorRT-RTX EP, one after another.

    python -m bench.rtx.compile_many JOBS.json --target sm89 --standins DIR --wheel-home DIR

JOBS.json: [{"model": path, "out": path, "log": path, "shapes": [MIN, OPT, MAX] or null}, ...]. Like bench/rtx/compile_one.py
(same fake-GPU namespace, stand-in libraries, provider options), but the plugin is loaded
once for the whole list: loading it costs more than compiling a single-op model. Each
model's EP log goes to its own file: file descriptor 2 is pointed at `log` around each
compile (the EP's logger writes to the process's stderr). ORT's graph optimisations are
off, so the single op reaches the EP as written (no constant folding of its inputs).
One JSON line per job on stdout: {"index", "ok", "seconds", "error", "outside_ep"}; the
parent restarts the list after a job that crashed the process.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

from bench.rtx.compile_one import load_with_standins as _load, provider_options

_libc = ctypes.CDLL(None)


def _flush() -> None:
    sys.stderr.flush()
    _libc.fflush(None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", type=Path)
    parser.add_argument("--target", default="sm89")
    parser.add_argument("--standins", type=Path, required=True)
    parser.add_argument("--wheel-home", type=Path, required=True)
    args = parser.parse_args(argv)
    jobs = json.loads(args.jobs.read_text())
    ort = _load(args.standins, args.wheel_home)
    import onnx

    gpus = [d for d in ort.get_ep_devices()
            if d.ep_name != "CPUExecutionProvider" and d.device.type == ort.OrtHardwareDeviceType.GPU]
    saved = os.dup(2)
    for index, job in enumerate(jobs):
        if not gpus:
            print(json.dumps({"index": index, "ok": False, "seconds": 0.0,
                              "error": "the EP lists no GPU device (fake device not seen)"}), flush=True)
            continue
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        options.add_provider_for_devices(gpus[:1], provider_options(args.target, job.get("shapes")))
        result = {"index": index, "ok": False, "seconds": 0.0, "error": "", "outside_ep": []}
        _flush()
        with open(job["log"], "w") as log:
            os.dup2(log.fileno(), 2)
            start = time.perf_counter()
            try:
                compiler = ort.ModelCompiler(options, job["model"], embed_compiled_data_into_model=True)
                compiler.compile_to_file(job["out"])
                result["ok"] = True
            except Exception as exc:  # the EP's or ORT's refusal: reported, not raised
                result["error"] = str(exc).strip()
            result["seconds"] = time.perf_counter() - start
            _flush()
            os.dup2(saved, 2)
        if result["ok"]:
            compiled = onnx.load(job["out"], load_external_data=False)
            result["outside_ep"] = [n.op_type for n in compiled.graph.node if n.op_type != "EPContext"]
            Path(job["out"]).unlink()
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
