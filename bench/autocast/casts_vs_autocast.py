"""Issue 16's "done when" alone: trtpipe's default recipes against ModelOpt AutoCast's defaults, untimed.

    python -m bench.autocast.casts_vs_autocast [--layers 12 24] [--models nafnet t5]   # from the checkout root

The same judgement as the end of `python -m bench.autocast`
(bench/autocast/done_when.py), without its timing repetitions and its "matched
exclusions" run: per model (every built-in model and the BERT-like encoders of
bench/common/encoders.py), one conversion of the raw export by trtpipe's whole path
(its recipe's sanitize -> upgrade_opset -> precision) and one by
`convert_to_mixed_precision(low_precision_type="fp16")` with every other argument
at its default; then trtpipe's written Casts against AutoCast's + the float graph
inputs and outputs trtpipe keeps in their type and AutoCast turns FP16 (read off
both files), the paired accuracy verdict on 64 held-out inputs under the FP16
emulation (bench/autocast/paired_accuracy.py), PASS/FAIL per model, and the Casts trtpipe's
plan charges to each protective reason. Exit 1 when a model FAILs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import onnx

from bench.common.cases import BUILTIN_CASES, encoder_case, prepare_case
from bench.autocast.converters import autocast_defaults, autocast_unavailable, convert_whole_path, convert_with_autocast
from bench.autocast.done_when import print_done_when
from bench.autocast.output_facts import kept_float_io, reference_outputs
from bench.autocast.precision_vs_autocast import measure_side


def done_when_results(cases, work_dir: Path) -> list[dict]:
    """precision_vs_autocast's result rows, trtpipe and AutoCast defaults only, one untimed run each."""
    unavailable = autocast_unavailable()
    results = []
    for case in cases:
        prepared = prepare_case(case, work_dir / case.name)
        source = onnx.load(str(prepared.raw_path))
        references = reference_outputs(source, prepared.eval_feeds)
        ours = convert_whole_path(prepared.raw_path, prepared.stage_configs, work_dir / case.name / "trtpipe")
        plan = json.loads((ours.parent / "precision_plan.json").read_text())
        result = {"model": case.name, "recipe": case.recipe,
                  "casts_by_reason": plan["totals"].get("casts_by_reason", {}),
                  "trtpipe": measure_side([0.0], ours, source, {}, references, prepared.eval_feeds)}
        theirs = None
        if unavailable:
            result["autocast_defaults"] = {"status": f"unavailable ({unavailable})"}
        else:
            try:
                theirs = convert_with_autocast(prepared.raw_path, autocast_defaults(),
                                               work_dir / case.name / "autocast_defaults")
                result["autocast_defaults"] = measure_side([0.0], theirs, source, {}, references, prepared.eval_feeds)
            except Exception as error:  # AutoCast failing on a model is a result
                result["autocast_defaults"] = {"status": f"failed ({type(error).__name__}: {str(error)[:200]})"}
        result["kept_float_io"] = kept_float_io(source, ours, theirs)
        results.append(result)
        print(f"  {case.name}: done", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[12, 24])
    parser.add_argument("--models", nargs="*", help="only these cases (default: all)")
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    cases = BUILTIN_CASES + [encoder_case(n) for n in args.layers]
    if args.models:
        cases = [case for case in cases if case.name in args.models]
    results = done_when_results(cases, Path(args.work_dir or tempfile.mkdtemp(prefix="trtpipe-casts-")))
    passed = print_done_when(results)
    for r in results:
        print(f"  {r['model']}: trtpipe Casts by reason {r['casts_by_reason']}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
