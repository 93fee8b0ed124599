"""trtpipe's precision stage against NVIDIA ModelOpt AutoCast, side by side in one run.

    python -m bench.precision_vs_autocast            # from the checkout root; README.md has the setup

Per model (the built-in `transformer`, `nafnet`, `mixed_precision`, and BERT-like
encoders of 4, 12, 24 and 48 layers from `bench/encoders.py`): wall time of each
tool (median of `--repeat` runs, same process, same machine, runs interleaved),
their ratio, Cast nodes and FP32 nodes of each output, and each output's accuracy
on the faithful FP16 emulation. Then the targets, as ratios with PASS/FAIL.

How the comparison is made fair (see also converters.py and cases.py):
- Both tools convert the same file: the model after its recipe's `sanitize`
  and `upgrade_opset` stages, which is what trtpipe's precision stage receives.
- Same exclusions: trtpipe plans with its recipe; the nodes its plan keeps
  FP32 are handed to AutoCast as `nodes_to_exclude` (exact names), and every
  automatic rule of AutoCast is off (`data_max`/`init_max`/depth of reduction).
  Whether each tool really left those nodes FP32 is measured on its output
  (`excl ok`), not assumed.
- What is timed: for trtpipe the whole stage (load, plan *including its FP32
  reference run on the sample inputs*, materialise, save model and plan); for
  AutoCast `convert_to_mixed_precision` plus `onnx.save`, *without* a reference
  run (its range rule is off). Any doubt therefore favours AutoCast.
- One untimed warm-up conversion per tool first (imports, ONNX Runtime start-up);
  `gc.collect()` before every timed run; the two tools alternate.
- A tool's repetitions on a model stop early once they add up to more than
  `--case-budget` seconds (at least one run): AutoCast's time grows with the
  square of the node count (10-25 s per run at 24 layers, 40-90 s at 48 on
  this 2-core machine, depending on its load), and the whole benchmark must
  stay near 3 minutes. So the 24-layer median is of 2-3 runs; the run count
  is printed with each time.
- AutoCast on the 48-layer encoder only with `--autocast-max-layers 48` (one
  run of 40-90 s, which would take the default run past 3 minutes); the
  48-layer target is about trtpipe alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import onnx

from bench.cases import BUILTIN_CASES, PreparedCase, encoder_case, prepare_case
from bench.converters import (
    autocast_fairness,
    autocast_unavailable,
    autocast_version,
    convert_with_autocast,
    convert_with_trtpipe,
    trtpipe_fp32_nodes,
)
from bench.output_facts import ModelFacts, accuracy, model_facts, reference_outputs
from bench.report import print_report

ENCODER_LAYERS = (4, 12, 24, 48)
# AutoCast on the 48-layer encoder takes 40-90 s per run here: opt-in, to keep the default run near 3 minutes.
AUTOCAST_MAX_LAYERS = 24


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    started = time.perf_counter()
    unavailable = autocast_unavailable()
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="trtpipe-bench-"))
    cases = BUILTIN_CASES + [encoder_case(layers) for layers in args.layers]
    print(f"preparing {len(cases)} models (recipe sanitize + upgrade_opset, untimed) in {work_dir}", flush=True)
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
    passed = print_report(results, environment)
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment, "results": results}, indent=2) + "\n")
        print(f"results written to {args.json}")
    if not args.work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0 if passed else 1


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per tool and model (median)")
    parser.add_argument("--case-budget", type=float, default=30.0,
                        help="no further repetition of a tool on a model once its runs exceed this many seconds")
    parser.add_argument("--layers", type=int, nargs="*", default=list(ENCODER_LAYERS), help="encoder depths")
    parser.add_argument("--autocast-max-layers", type=int, default=AUTOCAST_MAX_LAYERS,
                        help="run AutoCast on encoders up to this depth (48 adds one 40-90 s run)")
    parser.add_argument("--json", help="also write all measurements to this JSON file")
    parser.add_argument("--work-dir", help="keep prepared and converted models here (default: a temp dir, removed)")
    return parser.parse_args(argv)


def _autocast_skip_reason(case: PreparedCase, unavailable: str | None, max_layers: int) -> str | None:
    if unavailable:
        return f"unavailable ({unavailable})"
    layers = case.case.name.removeprefix("encoder-")
    if layers.isdigit() and int(layers) > max_layers:
        return f"skipped (> {max_layers} layers; --autocast-max-layers {layers} to include)"
    return None


def _warm_up(case: PreparedCase, work_dir: Path, with_autocast: bool) -> None:
    out = convert_with_trtpipe(case.model_path, case.precision_config, work_dir / "trtpipe")
    if with_autocast:
        fp32 = trtpipe_fp32_nodes(out.parent / "precision_plan.json", case.model_path)
        convert_with_autocast(case.model_path, autocast_fairness(fp32), work_dir / "autocast")


def _timed(convert) -> tuple[float, Path]:
    gc.collect()
    start = time.perf_counter()
    out = convert()
    return time.perf_counter() - start, out


def _measure(case: PreparedCase, work_dir: Path, args, autocast_skip: str | None) -> dict:
    source = onnx.load(str(case.model_path))
    trtpipe_seconds, autocast_seconds = [], []
    trtpipe_out = autocast_out = fp32 = autocast_error = None
    for rep in range(args.repeat):
        if sum(trtpipe_seconds) <= args.case_budget:
            seconds, trtpipe_out = _timed(
                lambda: convert_with_trtpipe(case.model_path, case.precision_config, work_dir / f"trtpipe-{rep}"))
            trtpipe_seconds.append(seconds)
            fp32 = trtpipe_fp32_nodes(trtpipe_out.parent / "precision_plan.json", case.model_path)
        if autocast_skip is None and autocast_error is None and sum(autocast_seconds) <= args.case_budget:
            try:
                seconds, autocast_out = _timed(
                    lambda: convert_with_autocast(case.model_path, autocast_fairness(fp32), work_dir / f"autocast-{rep}"))
                autocast_seconds.append(seconds)
            except Exception as error:  # AutoCast failing on a model is a result, not a crash of the benchmark
                autocast_error = f"failed ({type(error).__name__}: {str(error)[:200]})"
    references = reference_outputs(source, case.eval_feeds)
    result = {
        "model": case.case.name, "recipe": case.case.recipe, "nodes": len(source.graph.node),
        "fp32_requested": len(fp32),
        "trtpipe": _side(trtpipe_seconds, trtpipe_out, source, fp32, references, case.eval_feeds),
    }
    if autocast_out is not None:
        result["autocast"] = _side(autocast_seconds, autocast_out, source, fp32, references, case.eval_feeds)
    else:
        result["autocast"] = {"status": autocast_error or autocast_skip}
    return result


def _side(seconds: list[float], out: Path, source, fp32: list[str], references, feeds) -> dict:
    converted = onnx.load(str(out))
    facts: ModelFacts = model_facts(converted, source, fp32)
    facts.accuracy = accuracy(references, converted, feeds)
    return {"status": "ok", "seconds": [round(s, 4) for s in seconds], "median": statistics.median(seconds),
            **facts.to_json()}


if __name__ == "__main__":
    raise SystemExit(main())
