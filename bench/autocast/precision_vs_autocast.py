"""trtpipe's whole path against NVIDIA ModelOpt AutoCast, from the same raw export, in one run.

    python -m bench.autocast            # from the checkout root; README.md has the setup

Per model (every built-in model: `transformer`, `nafnet`, `mixed_precision`, `t5`,
`gpt2`; and BERT-like encoders of 4, 12, 24 and 48 layers from `bench/common/encoders.py`;
`--models` picks some of them), three timed
conversions of the same raw file, interleaved, plus the yardstick:
- trtpipe: its recipe's sanitize -> upgrade_opset -> precision, through the real
  stage code (converters.convert_whole_path);
- AutoCast, "matched exclusions": `convert_to_mixed_precision` told to keep
  exactly trtpipe's FP32 nodes, its own rules off;
- AutoCast, "defaults": `convert_to_mixed_precision(low_precision_type="fp16")`;
- `onnx.load` + `onnx.save` of the raw file.
For each output: Casts, FP32 nodes, FP16 share of the MatMul/Gemm/Conv FLOPs, and
accuracy of every graph output on the faithful FP16 emulation against the raw
model in ONNX Runtime, on 64 held-out inputs (seed 1; the recipes plan with seed 0),
judged per output by a paired, noise-aware verdict against each AutoCast run
(paired_accuracy.py). Then the targets, every one a ratio measured in this run,
and issue 16's "done when" per model (report.py, done_when.py).

How the comparison is made fair (see also converters.py and cases.py):
- Same input: the raw export, for both. trtpipe's time includes its sanitize
  and upgrade stages; AutoCast's includes its own graph sanitizer.
- Matched exclusions: trtpipe's FP32 nodes go to AutoCast by every name they
  may have in the raw file (a fused LayerNorm by the nodes it absorbed and by
  AutoCast's name for its own fusion). Whether each tool really left them FP32
  is measured on its output (`excl ok`), not assumed. trtpipe's time includes
  its FP32 reference run; AutoCast's matched run has none (its range rule is
  off): any doubt favours AutoCast. Its defaults run its own reference run.
- One untimed warm-up conversion per tool first (imports, ONNX Runtime start-up);
  `gc.collect()` before every timed run; the tools alternate.
- A tool's repetitions on a model stop once they add up to more than
  `--case-budget` seconds (at least one run): AutoCast's time grows with the
  square of the node count (10-25 s per run at 24 layers, 40-90 s at 48 on a
  2-core machine), so its 24-layer medians are of 1-2 runs; the run count is
  printed with each time. AutoCast on encoders deeper than
  `--autocast-max-layers` (default 24) only on request.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

from bench.common.cases import BUILTIN_CASES, PreparedCase, encoder_case, prepare_case
from bench.autocast.converters import (
    autocast_defaults,
    autocast_matched,
    autocast_unavailable,
    autocast_version,
    convert_with_autocast,
    convert_whole_path,
    exclusion_aliases,
    load_save,
    trtpipe_fp32_nodes,
)
from bench.autocast.output_facts import fp32_node_names, kept_float_io, model_facts, reference_outputs, sample_metrics
from bench.autocast.report import print_report
from trtpipe.numerics.metrics import json_float, worst_metrics

ENCODER_LAYERS = (4, 12, 24, 48)
AUTOCAST_MAX_LAYERS = 24  # AutoCast at 48 layers: 40-90 s per run and argument set, on request
AUTOCAST_RUNS = ("autocast_matched", "autocast_defaults")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    started = time.perf_counter()
    unavailable = autocast_unavailable()
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="trtpipe-bench-"))
    cases = BUILTIN_CASES + [encoder_case(layers) for layers in args.layers]
    if args.models:
        unknown = set(args.models) - {case.name for case in cases}
        if unknown:
            raise SystemExit(f"unknown --models {sorted(unknown)}; known: {[case.name for case in cases]}")
        cases = [case for case in cases if case.name in args.models]
    print(f"writing {len(cases)} raw exports in {work_dir}", flush=True)
    prepared = [prepare_case(case, work_dir / case.name) for case in cases]
    _warm_up(prepared[0], work_dir / "warm-up", unavailable is None)
    results = []
    for case in prepared:
        skip = _autocast_skip_reason(case, unavailable, args.autocast_max_layers)
        results.append(_measure(case, work_dir / case.case.name, args, skip))
        print(f"  {case.case.name}: done", flush=True)
    autocast = f"unavailable ({unavailable})" if unavailable else autocast_version()
    environment = {"autocast": autocast, "onnx": onnx.__version__,
                   "seconds_total": round(time.perf_counter() - started, 1)}
    printed = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, printed)):
        passed = print_report(results, environment)
    if args.record:
        from bench.autocast.record import record
        record(printed.getvalue(), command=" ".join(["python -m bench.autocast", *(sys.argv[1:] if argv is None else argv)]))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment, "results": results}, indent=2) + "\n")
        print(f"results written to {args.json}")
    if not args.work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0 if passed else 1


class _Tee:
    """Print to the console and keep a copy: --record reads the report exactly as printed."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per tool and model (median)")
    parser.add_argument("--case-budget", type=float, default=30.0,
                        help="no further repetition of a tool on a model once its runs exceed this many seconds")
    parser.add_argument("--layers", type=int, nargs="*", default=list(ENCODER_LAYERS), help="encoder depths")
    parser.add_argument("--autocast-max-layers", type=int, default=AUTOCAST_MAX_LAYERS,
                        help="run AutoCast on encoders up to this depth (48 adds two 40-90 s runs)")
    parser.add_argument("--models", nargs="*", help="only these cases (e.g. nafnet encoder-12; default: all)")
    parser.add_argument("--json", help="also write all measurements to this JSON file")
    parser.add_argument("--record", action="store_true",
                        help="also write bench/autocast/results.json from the printed report (bench/autocast/record.py)")
    parser.add_argument("--work-dir", help="keep raw and converted models here (default: a temp dir, removed)")
    return parser.parse_args(argv)


def _autocast_skip_reason(case: PreparedCase, unavailable: str | None, max_layers: int) -> str | None:
    if unavailable:
        return f"unavailable ({unavailable})"
    layers = case.case.name.removeprefix("encoder-")
    if layers.isdigit() and int(layers) > max_layers:
        return f"skipped (> {max_layers} layers; --autocast-max-layers {layers} to include)"
    return None


def _warm_up(case: PreparedCase, work_dir: Path, with_autocast: bool) -> None:
    paths = convert_whole_path(case.raw_path, case.stage_configs, work_dir / "trtpipe")
    load_save(case.raw_path, work_dir / "io")
    if with_autocast:
        convert_with_autocast(case.raw_path, autocast_matched(_aliases(paths)), work_dir / "autocast")


def _aliases(out: Path) -> dict[str, list[str]]:
    """trtpipe's FP32 nodes (its plan) with their names in the raw export."""
    precision_dir = out.parent
    precision_input = _precision_input(precision_dir.parent)
    return exclusion_aliases(trtpipe_fp32_nodes(precision_dir / "precision_plan.json", precision_input),
                             precision_input)


def _precision_input(trtpipe_dir: Path) -> Path:
    for stage in ("upgrade_opset", "sanitize"):
        if (trtpipe_dir / stage / "model.onnx").exists():
            return trtpipe_dir / stage / "model.onnx"
    raise FileNotFoundError(f"no stage output before precision in {trtpipe_dir}")


def _timed(convert) -> tuple[float, Path]:
    gc.collect()
    start = time.perf_counter()
    out = convert()
    return time.perf_counter() - start, out


def _measure(case: PreparedCase, work_dir: Path, args, autocast_skip: str | None) -> dict:
    source = onnx.load(str(case.raw_path))
    seconds = {"load_save": [], "trtpipe": [], **{run: [] for run in AUTOCAST_RUNS}}
    outputs: dict[str, Path] = {}
    errors: dict[str, str] = {}
    aliases: dict[str, list[str]] = {}
    for rep in range(args.repeat):
        elapsed, _ = _timed(lambda: load_save(case.raw_path, work_dir / f"io-{rep}"))
        seconds["load_save"].append(elapsed)
        if sum(seconds["trtpipe"]) <= args.case_budget:
            elapsed, outputs["trtpipe"] = _timed(
                lambda: convert_whole_path(case.raw_path, case.stage_configs, work_dir / f"trtpipe-{rep}"))
            seconds["trtpipe"].append(elapsed)
            aliases = _aliases(outputs["trtpipe"])
        for run in AUTOCAST_RUNS:
            if autocast_skip or run in errors or sum(seconds[run]) > args.case_budget:
                continue
            arguments = autocast_matched(aliases) if run == "autocast_matched" else autocast_defaults()
            try:
                elapsed, outputs[run] = _timed(
                    lambda: convert_with_autocast(case.raw_path, arguments, work_dir / f"{run}-{rep}"))
                seconds[run].append(elapsed)
            except Exception as error:  # AutoCast failing on a model is a result, not a crash of the benchmark
                errors[run] = f"failed ({type(error).__name__}: {str(error)[:200]})"
    references = reference_outputs(source, case.eval_feeds)
    result = {
        "model": case.case.name, "recipe": case.case.recipe, "nodes": len(source.graph.node),
        "fp32_requested": len(aliases),
        "float_io": _float_io(source),
        "kept_float_io": kept_float_io(source, outputs.get("trtpipe"), outputs.get("autocast_defaults")),
        "load_save": {"seconds": _rounded(seconds["load_save"]), "median": statistics.median(seconds["load_save"])},
    }
    for run in ("trtpipe", *AUTOCAST_RUNS):
        if run in outputs:
            result[run] = measure_side(seconds[run], outputs[run], source, aliases, references, case.eval_feeds)
        else:
            result[run] = {"status": errors.get(run) or autocast_skip}
    return result


def _float_io(model: onnx.ModelProto) -> int:
    """Float graph inputs and outputs of the raw export."""
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
    return sum(value.type.tensor_type.elem_type in floats for value in [*model.graph.input, *model.graph.output])


def _rounded(values: list[float]) -> list[float]:
    return [round(value, 4) for value in values]


def measure_side(seconds: list[float], out: Path, source, aliases, references, feeds) -> dict:
    converted = onnx.load(str(out))
    facts = model_facts(converted, source, aliases, feeds[0])
    per_sample = sample_metrics(references, converted, feeds)
    facts.accuracy = {name: worst_metrics(metrics) for name, metrics in per_sample.items()}
    rel_l2 = {name: [json_float(m.rel_l2) for m in metrics] for name, metrics in per_sample.items()}
    return {"status": "ok", "seconds": _rounded(seconds), "median": statistics.median(seconds), **facts.to_json(),
            "fp32_node_names": fp32_node_names(converted), "rel_l2_samples": rel_l2}


if __name__ == "__main__":
    raise SystemExit(main())
