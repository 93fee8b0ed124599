"""The script a deferred build leaves behind: build the same engine later, on a GPU machine.

Decision: one script for both backends (`build.backend` is in the config it carries); only its
help text names what to install.

Decision: the script is an artifact, so it must be byte-identical for the same inputs
and config: it names its inputs by sha256 (the digests the manifest records), not by
path, and finds them through the `manifest.json` of the run directory it was published
to; `--model`/`--plan` override. It runs the same `BuildEngine` stage code with
`on_missing=error`, so the engine, layer information and audit are the ones a GPU run of
the pipeline would have produced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

SCRIPT_NAME = "build_on_gpu.py"

_TEMPLATE = '''#!/usr/bin/env python3
"""Build the {product} engine that this trtpipe run deferred ({missing} where it ran).

On {machine}:
    {install}
    python build_on_gpu.py                  # from the run directory's build/ folder
    python build_on_gpu.py --model model.onnx --plan precision_plan.json --out engine_dir

Inputs are found by sha256 in the run directory's manifest.json (or given explicitly);
outputs ({outputs}, precision_audit.json, build.log) go to --out
(default: ./gpu_build next to this script). Exit code 1 if the build or the audit fails.
"""

import argparse
import json
import sys
from pathlib import Path

MODEL_SHA256 = {model_sha256!r}
PLAN_SHA256 = {plan_sha256!r}
BUILD_CONFIG = json.loads({config_json!r})


def from_manifest(run_dir, digest):
    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        return None
    for stage in json.loads(manifest.read_text()).get("stages", []):
        for output in (stage.get("outputs") or {{}}).values():
            if output.get("sha256") == digest and (run_dir / output["path"]).is_file():
                return run_dir / output["path"]
    return None


def main(argv=None):
    here = Path(sys.argv[0]).absolute().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="the ONNX the build consumed (default: found by sha256)")
    parser.add_argument("--plan", type=Path, help="precision_plan.json (default: found by sha256)")
    parser.add_argument("--out", type=Path, default=here / "gpu_build", help="output directory")
    args = parser.parse_args(argv)
    model = args.model or from_manifest(here.parent, MODEL_SHA256)
    plan = args.plan or from_manifest(here.parent, PLAN_SHA256)
    if model is None or plan is None:
        parser.error("cannot find the model/plan of this run by sha256; give --model and --plan")
    from trtpipe.errors import TrtpipeError
    from trtpipe.cache.hashing import artifact_digest
    from trtpipe.stages.build import BuildEngine

    for path, digest in ((model, MODEL_SHA256), (plan, PLAN_SHA256)):
        if artifact_digest(path) != digest:
            print(f"warning: {{path}} is not the file the deferred build saw (sha256 differs)", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        outcome = BuildEngine().run({{"model": model, "plan": plan}}, BUILD_CONFIG, args.out)
    except TrtpipeError as error:
        print(f"build failed: {{error}}", file=sys.stderr)
        return error.exit_code
    print(f"build: {{outcome.status}}  {{outcome.summary}}")
    if outcome.console_file:
        print((args.out / outcome.console_file).read_text(), end="")
    print(f"outputs in {{args.out}}")
    if outcome.failed:
        print(outcome.failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def build_script(model_sha256: str, plan_sha256: str, config: Mapping) -> str:
    """The script text; `config` is the stage's own config (on_missing is forced to error)."""
    # Only what the stage's cache key holds (BuildEngine.key_config): the script is an output.
    from trtpipe.trt.rtx.options import TENSORRT_ONLY

    unread = ("rtx",) if config.get("backend", "tensorrt") == "tensorrt" else TENSORRT_ONLY
    build_config = {key: value for key, value in config.items()
                    if key not in ("cache_dir", "data", "data_shapes", *unread)}
    build_config["on_missing"] = "error"
    config_json = json.dumps(build_config, sort_keys=True, separators=(",", ":"))
    return _TEMPLATE.format(model_sha256=model_sha256, plan_sha256=plan_sha256, config_json=config_json,
                            **_BACKEND_TEXT[build_config.get("backend", "tensorrt")])


# What the script's help says per build.backend (the same BuildEngine code runs either way).
_BACKEND_TEXT = {
    "tensorrt": dict(product="TensorRT", missing="no TensorRT or no GPU", machine="a machine with an NVIDIA GPU",
                     install="pip install tensorrt-cu13              # CUDA 13; or tensorrt-cu12 for CUDA 12 "
                             "(trtpipe installed too)",
                     outputs="model.engine, layer_info.json"),
    "tensorrt_rtx": dict(product="TensorRT-RTX", missing="no TensorRT-RTX EP or no RTX GPU",
                         machine="a machine with an RTX GPU (sm86/sm89/sm120/sm121) and the NVIDIA driver",
                         install="pip install onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0   # CUDA 12 "
                                 "(trtpipe installed too)",
                         outputs="model_ctx.onnx (EPContext model)"),
}
