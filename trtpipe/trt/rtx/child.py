"""The child process that loads the TensorRT-RTX EP: `python -m trtpipe.trt.rtx.child probe|compile`.

    probe                                   -> {"ok", "devices", "problem", "fix"}
    compile MODEL OUT --target sm89 [--option KEY=VALUE ...]
                                            -> {"ok", "seconds", "problem", "fix", "error"}

One JSON line on stdout; the EP's log (the parser's per-node lines with
`nv_detailed_build_log=1`, the builder's timings) goes to stderr, which the parent keeps
as build/build.log (why a child at all: trtpipe/trt/rtx/__init__.py).

Compile decisions (the EP's provider options, tensorrt_rtx_provider_options.h of the wheel):
- `nv_target_sm`: the engine is built ahead of time for that RTX architecture, with no CUDA
  call ("Using legacy CPU-only mode"), so it does not depend on which RTX GPU is in this
  machine, only on the target.
- `nv_detailed_build_log=1`, with ORT's default logger at WARNING (the detailed lines arrive
  as warnings): the per-node parser lines the precision audit reads.
- session option `session.disable_cpu_ep_fallback=1`: a node the EP does not take fails the
  build instead of being left silently to ONNX Runtime's CPU EP; the engine is all of the graph.
- `embed_compiled_data_into_model=True`: one file, the `engine` artifact, holds the engine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trtpipe.trt.rtx.loader import EpUnavailable, devices, first_device, load


def probe() -> dict:
    try:
        ort = load()
    except EpUnavailable as missing:
        return {"ok": False, "devices": [], "problem": missing.problem, "fix": missing.fix}
    found = [{"vendor_id": d.device.vendor_id, "device_id": d.device.device_id} for d in devices(ort)]
    return {"ok": True, "devices": found, "problem": "", "fix": ""}


def compile_model(model: Path, out: Path, target: str, options: dict[str, str]) -> dict:
    try:
        ort = load()
        device = first_device(ort)
    except EpUnavailable as missing:
        return {"ok": False, "seconds": 0.0, "problem": missing.problem, "fix": missing.fix, "error": ""}
    ort.set_default_logger_severity(2)
    session = ort.SessionOptions()
    session.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    session.add_provider_for_devices([device], {**options, "nv_target_sm": target, "nv_detailed_build_log": "1"})
    start = time.perf_counter()
    try:
        compiler = ort.ModelCompiler(session, str(model), embed_compiled_data_into_model=True)
        compiler.compile_to_file(str(out))
    except Exception as error:  # the EP's or ORT's refusal: reported to the parent, not raised
        return {"ok": False, "seconds": time.perf_counter() - start, "problem": "", "fix": "",
                "error": " ".join(str(error).split())}
    return {"ok": True, "seconds": time.perf_counter() - start, "problem": "", "fix": "", "error": ""}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trtpipe.trt.rtx.child", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("probe")
    build = commands.add_parser("compile")
    build.add_argument("model", type=Path)
    build.add_argument("out", type=Path)
    build.add_argument("--target", required=True)
    build.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.command == "probe":
        result = probe()
    else:
        options = dict(item.split("=", 1) for item in args.option)
        result = compile_model(args.model, args.out, args.target, options)
    sys.stderr.flush()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
