"""Time `trtpipe-inspect MODEL` and `polygraphy inspect model MODEL` on the same model files.

Issue 33's target: trtpipe-inspect answers in at most Polygraphy's time (4.6 s there for
`polygraphy inspect model`), with no stage run.

Models, written to a scratch folder first (untimed):
- `transformer`: the built-in example model (152 nodes, 0.4 MB, opset 13: the opset conversion
  and the LayerNorm fusion preview both run);
- `encoder`: bench/common/encoders.py's BERT-base-width encoder, 12 layers at hidden 768, its
  weights in an external data file (a few hundred MB): a realistic size, where reading the
  weights would dominate.

Each command runs in a fresh process (interleaved, `--repeat` times, median wall seconds), as a
user types it: `python -m trtpipe.inspect_model MODEL` (what the `trtpipe-inspect` console script
runs) and the `polygraphy` console script next to this interpreter, both with their default
output. Exit 1 when trtpipe-inspect is slower than Polygraphy on a model.

Decision: both run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from the
environment; the untimed first run writes the checkout's `__pycache__`), as an installed wheel
runs: pip compiles every module at install, and Polygraphy's are compiled in site-packages.
Without it every trtpipe module is compiled from source on each run (0.17 s of 1.8 s measured
under cProfile with PYTHONDONTWRITEBYTECODE=1), which times the checkout, not the command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from bench.common.results import ROOT, write_results

ENCODER_LAYERS, ENCODER_HIDDEN = 12, 768


def write_models(folder: Path) -> dict[str, Path]:
    from bench.common.encoders import build_encoder
    from trtpipe.models.transformer import build_transformer

    paths = {"transformer": folder / "transformer.onnx", "encoder": folder / "encoder.onnx"}
    onnx.save(build_transformer(), str(paths["transformer"]))
    onnx.save(build_encoder(ENCODER_LAYERS, hidden=ENCODER_HIDDEN), str(paths["encoder"]), save_as_external_data=True,
              location="encoder.onnx.data", size_threshold=1024)
    return paths


def timed(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command and model (median reported)")
    parser.add_argument("--record", action="store_true", help="write bench/inspect/results.json")
    args = parser.parse_args(argv)
    polygraphy = Path(sys.executable).with_name("polygraphy")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # module docstring
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="trtpipe-bench-inspect-") as scratch:
        models = write_models(Path(scratch))
        commands = {(model, tool): command for model, path in models.items() for tool, command in (
            ("trtpipe", [sys.executable, "-m", "trtpipe.inspect_model", str(path)]),
            ("polygraphy", [str(polygraphy), "inspect", "model", str(path)]))}
        for command in commands.values():  # warm the file cache (untimed)
            timed(command, env)
        times: dict = {key: [] for key in commands}
        for _ in range(args.repeat):
            for key, command in commands.items():
                times[key].append(timed(command, env))
        for model, path in models.items():
            data = path.with_name(path.name + ".data")
            figures[f"{model}.model_mb"] = round((path.stat().st_size + (data.stat().st_size if data.exists() else 0))
                                                 / 1e6, 1)
            figures[f"{model}.nodes"] = len(onnx.load(str(path), load_external_data=False).graph.node)
    failed = False
    print(f"trtpipe-inspect vs polygraphy inspect model (median of {args.repeat}, interleaved; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for model in models:
        ours, theirs = (statistics.median(times[(model, tool)]) for tool in ("trtpipe", "polygraphy"))
        figures.update({f"{model}.trtpipe_s": round(ours, 2), f"{model}.polygraphy_s": round(theirs, 2),
                        f"{model}.ratio": round(ours / theirs, 2)})
        failed |= ours > theirs
        print(f"  {model:12} {figures[f'{model}.model_mb']:8.1f} MB  trtpipe-inspect {ours:6.2f} s  "
              f"polygraphy {theirs:6.2f} s  ratio {ours / theirs:5.2f}  {'ok' if ours <= theirs else 'SLOWER'}")
    if args.record:
        figures["repeat"] = args.repeat
        write_results("inspect", figures, command="python -m bench.inspect --record",
                      notes="median wall seconds of a fresh process per command, interleaved; target ratio <= 1")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
