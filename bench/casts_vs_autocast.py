"""Casts and accuracy: trtpipe's default recipes against ModelOpt AutoCast with *its* defaults.

    python -m bench.casts_vs_autocast [--layers 12 24]      # from the checkout root

Per model (the built-in `transformer`, `nafnet`, `mixed_precision`, `t5`, `gpt2` and
the BERT-like encoders of bench/encoders.py): Cast nodes in each tool's output,
FP32 nodes, the Casts AutoCast is allowed fewer (one per float graph input and
output that trtpipe keeps in its original type, `keep_io_types`, which AutoCast's
defaults turn to FP16 instead), and the accuracy of each output on trtpipe's FP16
emulation, on held-out inputs (bench/cases.py). The target of issue 16: trtpipe's
Casts <= AutoCast's + allowance, and accuracy at least AutoCast's.

trtpipe's Casts are every Cast in its output, the model's own included: they run in the
engine like any other. How many of them are the author's (kept by the mixed_precision
recipe) is shown as "(n authored)"; the author's dead or exact no-op Casts are removed
(trtpipe/precision/redundant_casts.py).
`cast_rows()` returns the rows (one dict per model) for other benchmarks to fold in.
AutoCast runs with every argument at its default (`data_max=512`, `init_max=65504`,
`keep_io_types=False`, random calibration data), from the same prepared file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import onnx

from bench.cases import BUILTIN_CASES, Case, encoder_case, prepare_case
from bench.converters import autocast_unavailable, convert_with_autocast, convert_with_trtpipe
from bench.output_facts import accuracy, reference_outputs
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model

ACCURATE_COSINE = 0.9999
FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
EXTRA_BUILTINS = [
    Case(name, "transformer_fp16", (lambda n=name: builtin_model(n)), BUILTIN_INPUT_SPECS[name]) for name in ("t5", "gpt2")
]


def cast_rows(layers: tuple[int, ...] = (12, 24), work_dir: Path | None = None,
              models: tuple[str, ...] = ()) -> list[dict]:
    """One row per model (only `models`, by name, when given): trtpipe's and AutoCast's Casts,
    FP32 nodes and worst accuracy."""
    unavailable = autocast_unavailable()
    work_dir = Path(work_dir or tempfile.mkdtemp(prefix="trtpipe-casts-"))
    rows = []
    cases = BUILTIN_CASES + EXTRA_BUILTINS + [encoder_case(n) for n in layers]
    for case in [c for c in cases if not models or c.name in models]:
        prepared = prepare_case(case, work_dir / case.name)
        source = onnx.load(str(prepared.model_path))
        references = reference_outputs(source, prepared.eval_feeds)
        ours = onnx.load(str(convert_with_trtpipe(prepared.model_path, prepared.precision_config,
                                                  work_dir / case.name / "trtpipe")))
        plan = json.loads((work_dir / case.name / "trtpipe" / "precision_plan.json").read_text())
        row = {"model": case.name, "recipe": case.recipe, "trtpipe": _facts(ours, references, prepared.eval_feeds),
               "authored_casts": _authored_casts_kept(source, ours),
               "casts_by_reason": plan["totals"].get("casts_by_reason", {}),
               "allowance": _kept_float_io(source) if prepared.precision_config["keep_io_types"] else 0}
        if unavailable is None:
            theirs = onnx.load(str(convert_with_autocast(prepared.model_path, {}, work_dir / case.name / "autocast")))
            row["autocast"] = _facts(theirs, references, prepared.eval_feeds)
        else:
            row["autocast"] = {"unavailable": unavailable}
        rows.append(row)
    return rows


def _facts(model: onnx.ModelProto, references: list[dict], feeds: list[dict]) -> dict:
    metrics = accuracy(references, model, feeds)
    fp32 = _fp32_nodes(model)
    return {
        "casts": sum(1 for node in model.graph.node if node.op_type == "Cast"),
        "fp32_nodes": fp32,
        "cosine": min(m.cosine for m in metrics.values()),
        "rel_l2": max(m.rel_l2 for m in metrics.values()),
        "psnr": min((m.psnr for m in metrics.values() if m.psnr is not None), default=None),
        "nonfinite": sum(m.nonfinite for m in metrics.values()),
    }


def _fp32_nodes(model: onnx.ModelProto) -> int:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    return sum(
        1 for node in model.graph.node
        if node.op_type != "Cast" and any(types.get(t) == onnx.TensorProto.FLOAT for t in node.output)
    )


def _authored_casts_kept(source: onnx.ModelProto, ours: onnx.ModelProto) -> int:
    authored = {node.name for node in source.graph.node if node.op_type == "Cast"}
    return sum(1 for node in ours.graph.node if node.op_type == "Cast" and node.name in authored)


def _kept_float_io(model: onnx.ModelProto) -> int:
    initializers = {t.name for t in model.graph.initializer}
    values = [v for v in model.graph.input if v.name not in initializers] + list(model.graph.output)
    return sum(1 for v in values if v.type.tensor_type.elem_type in FLOAT_TYPES)


def print_rows(rows: list[dict]) -> None:
    print(f"{'model':<16} {'trtpipe casts':>18} {'AutoCast casts':>14} {'allow':>5} {'target':>6}   "
          f"{'trtpipe cos / relL2 / fp32':>28}   {'AutoCast cos / relL2 / fp32':>28}")
    print("  target: PASS = Casts <= AutoCast's + allowance and cosine >= AutoCast's; MORE = more Casts;")
    print(f"  '*' after AutoCast's accuracy: below cosine {ACCURATE_COSINE} (the transformer recipe's bound) or non-finite")
    for row in rows:
        ours, theirs = row["trtpipe"], row["autocast"]
        if "unavailable" in theirs:
            print(f"{row['model']:<16} {ours['casts']:>18} {'-':>14}")
            continue
        fewer = ours["casts"] <= theirs["casts"] + row["allowance"]  # the author's Casts run too: counted
        verdict = ("PASS" if fewer else "MORE") if ours["cosine"] >= theirs["cosine"] - 1e-6 else "LESS ACC"
        shown = f"{ours['casts']}" + (f" ({row['authored_casts']} authored)" if row["authored_casts"] else "")
        flag = "" if theirs["cosine"] >= ACCURATE_COSINE and not theirs["nonfinite"] else " *"
        print(f"{row['model']:<16} {shown:>18} {theirs['casts']:>14} {row['allowance']:>5} "
              f"{verdict:>6}   {_accuracy(ours):>28}   {_accuracy(theirs) + flag:>28}")
    for row in rows:
        print(f"  {row['model']}: trtpipe Casts by reason {row['casts_by_reason']}")


def _accuracy(facts: dict) -> str:
    text = f"{facts['cosine']:.6f} / {facts['rel_l2']:.2e} / {facts['fp32_nodes']}"
    return text + (f" / {facts['nonfinite']} nonfinite" if facts["nonfinite"] else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[12, 24])
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--models", nargs="*", default=[], help="only these (e.g. mixed_precision encoder-12)")
    args = parser.parse_args(argv)
    print_rows(cast_rows(tuple(args.layers), args.work_dir, tuple(args.models)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
