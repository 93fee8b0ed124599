"""What a run directory and the cache hold on disk (~1 min):

    python -m bench.disk [--width 2048] [--layers 7] [--record]

A MatMul chain with float32 weights inline (width 2048, 7 layers: 117 MB, under the 256 MiB
external-data threshold, as a DistilBERT-base export) goes through the real command line,
`trtpipe model.path=M` (the default pipeline: sanitize, upgrade_opset, precision, build
deferred without TensorRT, validate), into a fresh cache: a first run, then the same command
again (fully cached), then `run.artifacts=final`. Sizes are bytes of regular files, each
(st_dev, st_ino) once (a hard link costs nothing), in MB of 1000 bytes; `copies_x_source` counts
every name as its own file: what the layout before issue 33 (a copy per name, an unchanged
stage's output stored again) would take for the same files.
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = "+data.inputs.x={low:-1,high:1,dtype:float32}"


def write_chain(path: Path, width: int, layers: int) -> Path:
    """y = x @ W0 @ W1 ..., x [1, width], float32 weights inline: width=2048, layers=7 is 117 MB
    (also the model of tests/test_run_dir_disk.py)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                       f"W{i}") for i in range(layers)]
    names = ["x"] + [f"h{i}" for i in range(layers - 1)] + ["y"]
    nodes = [helper.make_node("MatMul", [names[i], f"W{i}"], [names[i + 1]], name=f"mm{i}") for i in range(layers)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


def files(*roots: Path) -> list[os.stat_result]:
    found = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                info = os.lstat(os.path.join(folder, name))
                if stat.S_ISREG(info.st_mode):
                    found.append(info)
    return found


def unique_bytes(*roots: Path) -> int:
    """Bytes of the regular files under `roots`, each inode once (a hard link costs nothing)."""
    return sum({(info.st_dev, info.st_ino): info.st_size for info in files(*roots)}.values())


def run(folder: Path, model: Path, name: str, *overrides: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "trtpipe", f"model.path={model}", DATA, f"hydra.run.dir={name}",
                           *overrides], cwd=folder, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "TRTPIPE_CACHE": str(folder / "cache")})
    if done.returncode != 0:
        raise SystemExit(f"{name}: trtpipe failed ({done.returncode}): {done.stderr[-500:]}")
    return folder / name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=7)
    parser.add_argument("--record", action="store_true", help="write bench/disk/results.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trtpipe-disk-", dir=os.environ.get("TMPDIR")) as scratch:
        folder = Path(scratch)
        model = folder / "model" / "chain.onnx"
        model.parent.mkdir()
        write_chain(model, args.width, args.layers)
        source = model.stat().st_size
        cache = folder / "cache"
        first = run(folder, model, "first")
        cache_mb, both = unique_bytes(cache) / 1e6, unique_bytes(first, cache)
        copies = sum(info.st_size for info in files(first, cache))
        second = run(folder, model, "second")
        added = unique_bytes(first, second, cache) - both
        final = run(folder, model, "final", "run.artifacts=final")
        figures = {
            "source_mb": round(source / 1e6, 1),
            "cache_mb": round(cache_mb, 1),
            "run_dir_own_mb": round((both - unique_bytes(cache)) / 1e6, 2),
            "total_x_source": round(both / source, 2),
            "copies_x_source": round(copies / source, 2),
            "cached_run_added_mb": round(added / 1e6, 2),
            "final_run_dir_names_mb": round(sum(info.st_size for info in files(final)) / 1e6, 1),
        }
    for key, value in figures.items():
        print(f"{key:24} {value}")
    if args.record:
        from bench.common.results import write_results
        write_results("disk", figures, command="python -m bench.disk --record",
                      notes=f"a MatMul chain, width {args.width}, {args.layers} layers, float32 inline; "
                            "the default pipeline (build deferred: no TensorRT)")
    return 0
