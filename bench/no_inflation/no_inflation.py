"""What constant folding writes, with and without sanitize's growth rule (~1 min):

    python -m bench.no_inflation [--models light_resnet50 ...] [--record]

Each of onnx's `light_*` backend test models (installed with onnx; every weight is a
`ConstantOfShape` of its shape, so folding expands an 80 KB file into the full weights) goes
through the real command line, `trtpipe model.path=M stages=[sanitize]`, once with the
defaults and once with `sanitize.fold_growth_limit=null` (fold everything), each in its own
cache. Recorded per model: the source's size (`source_kb`), the sanitized model's
(`sanitized_kb`, default rule) and the unbounded fold's (`unbounded_mb`), sizes of the
`.onnx` file plus any external data, in KB/MB of 1000 bytes as the docs show them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def sanitized_bytes(model: Path, folder: Path, overrides: list[str]) -> int:
    folder.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "trtpipe", f"model.path={model}", "stages=[sanitize]",
                           "hydra.run.dir=run", *overrides], cwd=folder, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "TRTPIPE_CACHE": str(folder / "cache")})
    if done.returncode != 0:
        raise SystemExit(f"{model.name} {overrides}: trtpipe failed ({done.returncode}): {done.stderr[-500:]}")
    return sum(path.stat().st_size for path in (folder / "run" / "sanitize").iterdir()
               if path.name.startswith("model.onnx"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="light_* model names (default: all)")
    parser.add_argument("--record", action="store_true", help="write bench/no_inflation/results.json")
    args = parser.parse_args(argv)
    models = sorted(LIGHT.glob("light_*.onnx"))
    if args.models:
        models = [m for m in models if m.stem in args.models]
    figures = {}
    with tempfile.TemporaryDirectory(prefix="trtpipe-no-inflation-") as scratch:
        for model in models:
            source = model.stat().st_size
            bounded = sanitized_bytes(model, Path(scratch) / model.stem / "default", [])
            unbounded = sanitized_bytes(model, Path(scratch) / model.stem / "null", ["sanitize.fold_growth_limit=null"])
            figures.update({f"{model.stem}.source_kb": round(source / 1e3, 1),
                            f"{model.stem}.sanitized_kb": round(bounded / 1e3, 1),
                            f"{model.stem}.unbounded_mb": round(unbounded / 1e6, 2)})
            print(f"{model.stem:22} source {source / 1e3:8.1f} KB  sanitized {bounded / 1e3:8.1f} KB "
                  f"({bounded / source:5.2f}x)  fold everything {unbounded / 1e6:8.2f} MB", flush=True)
    if args.record:
        from bench.common.results import write_results
        write_results("no_inflation", figures, command="python -m bench.no_inflation --record",
                      notes=f"onnx {onnx.__version__}'s light_* backend test models")
    return 0
