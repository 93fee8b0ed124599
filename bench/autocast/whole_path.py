"""trtpipe's whole path, raw export -> mixed ONNX, against onnx.load + onnx.save of the same model.

    python -m bench.autocast.whole_path [--layers 24 48 96] [--repeat 3] [--hidden 768] [--record]

For BERT-like encoders of 24, 48 and 96 layers (bench/common/encoders.py, the
`transformer_fp16` recipe): the median seconds of each stage (sanitize,
upgrade_opset, precision: the real stage code, each reading the file the
previous one wrote), of the whole path, and of `onnx.load` + `onnx.save` of the
raw export; the ratio whole path / (load+save), and seconds per node, whose
flatness across depths says the path grows linearly. trtpipe only (no
AutoCast), about 1 minute. Issue 16's goal is a ratio <= 3 at every depth.
`--hidden 768` builds the encoders at BERT-base width (12 heads, FFN 3072;
~28 MB of FP32 weights per layer, so 12 layers are ~0.34 GB and 24 ~0.68 GB):
there load+save measures real weight I/O, as it does for the models users
convert, instead of little more than protobuf parsing (about 2-3 minutes for
`--layers 12 24 --repeat 2`).

Decisions:
- The stages are timed one by one inside each whole-path run (one
  `perf_counter` per stage) so the per-stage split and the total come from the
  same runs; `gc.collect()` before each run; load+save is timed in the same
  loop, interleaved, so both see the same machine load.
- The ratio is also given in CPU time of the process (`process_time`, every
  thread): on a shared machine whose other jobs take the cores, wall times of
  the same run can double while CPU times move far less.
- `--record` merges the rows into bench/autocast/results.json as `whole_path.h<hidden>.<model>.*`
  (`megabytes`, `sanitize_s`, ..., `whole_s`, `load_save_s`, `ratio`, `cpu_ratio`) with the
  run's `date` and `load_1min` (docs/figures.md#autocast); the other keys of the file stay.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common.cases import encoder_case, prepare_case
from bench.autocast.converters import load_save

LAYERS = (24, 48, 96)
WIDE_LAYERS = (12, 24)  # with --hidden 768: 0.34 and 0.68 GB
PROTOBUF_LIMIT = 2**31


def _estimated_bytes(layers: int, hidden: int | None) -> int:
    """FP32 weight bytes of a BERT-like encoder: 12·h² per layer (attention 4h², FFN 8h²)."""
    width = hidden or 64
    return 4 * 12 * width * width * layers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="*", default=None,
                        help=f"encoder depths (default {' '.join(map(str, LAYERS))}; "
                             f"with --hidden: {' '.join(map(str, WIDE_LAYERS))})")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=None,
                        help="encoder width (default: the built-in model's 64; 768 is BERT-base)")
    parser.add_argument("--record", action="store_true", help="merge the rows into bench/autocast/results.json")
    args = parser.parse_args(argv)
    layers_asked = args.layers or list(WIDE_LAYERS if args.hidden else LAYERS)
    too_large = [n for n in layers_asked if _estimated_bytes(n, args.hidden) >= PROTOBUF_LIMIT]
    if too_large:
        # Decision: refused before anything runs, not after the smaller depths were measured:
        # onnx.save of a model over 2 GiB fails (protobuf's limit) and the rows print only at the end.
        parser.error(f"--layers {' '.join(map(str, too_large))} at --hidden {args.hidden} would be over 2 GiB "
                     "(protobuf's limit for one file); bench.scale.scale measures models that large")
    rows = []
    with tempfile.TemporaryDirectory(prefix="trtpipe-whole-path-") as tmp:
        for layers in layers_asked:
            case = encoder_case(layers, args.hidden)
            prepared = prepare_case(case, Path(tmp) / case.name)
            rows.append(_measure(prepared, Path(tmp) / case.name, args.repeat))
            print(f"  {case.name}: done", flush=True)
            shutil.rmtree(Path(tmp) / case.name, ignore_errors=True)  # wide encoders: ~0.7 GB per file
    _print(rows)
    if args.record:
        _record(rows, args)
    return 0


def _record(rows: list[dict], args) -> None:
    import os

    from bench.common.results import environment, write_results

    prefix = f"whole_path.h{args.hidden or 64}"
    figures = {f"{prefix}.date": environment()["date"], f"{prefix}.load_1min": round(os.getloadavg()[0], 2),
               f"{prefix}.repeat": args.repeat}
    for r in rows:
        key = f"{prefix}.{r['model']}"
        figures.update({f"{key}.megabytes": round(r["megabytes"], 1), f"{key}.whole_s": round(r["total"], 3),
                        f"{key}.load_save_s": round(r["load_save"], 4),
                        f"{key}.ratio": round(r["total"] / r["load_save"], 3), f"{key}.cpu_ratio": round(r["cpu_ratio"], 3),
                        **{f"{key}.{name}_s": round(seconds, 3) for name, seconds in r["stages"].items()}})
    write_results("autocast", figures, command="python -m bench.autocast.whole_path --record",
                  notes="whole_path.* keys: trtpipe's whole path per stage against onnx.load + onnx.save",
                  owns=lambda key: key.startswith(f"{prefix}."))


def _measure(case, work_dir: Path, repeat: int) -> dict:
    import onnx

    stages = {name: [] for name in case.stage_configs}
    totals, io, cpu_totals, cpu_io = [], [], [], []
    for rep in range(repeat):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        load_save(case.raw_path, work_dir / f"io-{rep}")
        io.append(time.perf_counter() - start)
        cpu_io.append(time.process_time() - cpu)
        gc.collect()
        cpu = time.process_time()
        for name, seconds in _whole_path(case, work_dir / f"trtpipe-{rep}").items():
            stages[name].append(seconds)
        cpu_totals.append(time.process_time() - cpu)
        totals.append(sum(stages[name][-1] for name in stages))
        for copy in (f"io-{rep}", f"trtpipe-{rep}"):  # untimed: keeps disk use at one copy per stage
            shutil.rmtree(work_dir / copy, ignore_errors=True)
    nodes = len(onnx.load(str(case.raw_path), load_external_data=False).graph.node)
    return {"model": case.case.name, "nodes": nodes, "megabytes": case.raw_path.stat().st_size / 1e6,
            "load_save": statistics.median(io),
            "total": statistics.median(totals), "stages": {n: statistics.median(s) for n, s in stages.items()},
            "cpu_ratio": statistics.median(cpu_totals) / statistics.median(cpu_io)}


def _whole_path(case, out_dir: Path) -> dict[str, float]:
    from trtpipe.stages.precision import PlanPrecision
    from trtpipe.stages.sanitize import SanitizeModel
    from trtpipe.stages.upgrade_opset import UpgradeOpset

    classes = {stage.name: stage for stage in (SanitizeModel, UpgradeOpset, PlanPrecision)}
    seconds, model_path = {}, case.raw_path
    for name, config in case.stage_configs.items():
        stage_dir = out_dir / name
        stage_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        outcome = classes[name]().run({"model": model_path}, config, stage_dir)
        seconds[name] = time.perf_counter() - start
        model_path = stage_dir / outcome.outputs["model"]
    return seconds


def _print(rows: list[dict]) -> None:
    names = list(rows[0]["stages"])
    header = (f"{'model':<17}{'nodes':>7}{'MB':>7} | " + "".join(f"{n:>14}" for n in names)
              + f"{'whole path':>12}{'load+save':>11}{'ratio':>8}{'ms/node':>9}{'CPU ratio':>11}")
    print("\nmedian seconds")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['model']:<17}{r['nodes']:>7}{r['megabytes']:>7.0f} | "
              + "".join(f"{r['stages'][n]:>14.3f}" for n in names)
              + f"{r['total']:>12.3f}{r['load_save']:>11.4f}{r['total'] / r['load_save']:>7.1f}x"
              f"{1e3 * r['total'] / r['nodes']:>9.3f}{r['cpu_ratio']:>10.1f}x")


if __name__ == "__main__":
    raise SystemExit(main())
