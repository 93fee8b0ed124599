"""The benchmark's loop: each source model, each quantizer, each converter; one printed block per model.

A model counts in P ("keeps every quantized layer and passes") when, for every trtpipe config it runs
under (the default, and its fitting recipe when it has one), the engine of trtpipe's output lost no
layer quantized in the source's engine, no linear op or kernel planned FP16 runs FP32 in it, and
trtpipe's verdict is a pass (exit 0): the anchored criterion of trtpipe/validate/anchored.py, anchored on
the float model the benchmark passes as `validate.float_model`. AutoCast is measured beside it, not counted,
and so is trtpipe's default config without the float model (`derived`: the verdict anchored on the QDQ
model without its activation Q/DQ, what a user without the float model gets; its model is not built).
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.quantized import measure, quantize, sources
from bench.quantized.measure import Converted
from bench.rtx import check, quantized_layers, sandbox


@dataclass
class Row:
    source: sources.Source
    quantizer: str
    source_linear: int = 0
    source_quantized: int = 0
    error: str = ""
    converted: list[Converted] = field(default_factory=list)
    derived: Converted | None = None  # the default config without validate.float_model (not counted)

    @property
    def label(self) -> str:
        return f"{self.source.name}/{self.quantizer}"

    @property
    def trtpipe(self) -> list[Converted]:
        return [c for c in self.converted if c.tool.startswith("trtpipe")]

    @property
    def counts(self) -> bool:
        return not self.error and bool(self.trtpipe) and all(c.keeps_quantized and c.passed for c in self.trtpipe)


def unavailable(bench_python: str) -> str | None:
    """Why the benchmark cannot run here, or None: the oracle's sandbox, or a bench Python without
    torch, transformers or ModelOpt."""
    problem = sandbox.unavailable()
    if problem:
        return f"the TensorRT-RTX oracle cannot show its fake GPU: {problem}"
    probe = "import torch, transformers, modelopt.onnx.quantization, modelopt.onnx.autocast"
    done = subprocess.run([bench_python, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return (f"{bench_python} lacks torch, transformers or ModelOpt ({last}): install the `bench-quantize` "
                "extra into a venv of its own and pass its python as --bench-python (or $TRTPIPE_BENCH_PYTHON)")
    return None


def _print(line: str) -> None:
    print(line, flush=True)


def run_all(chosen: list[sources.Source], quantizers: list[str], work: Path, tmp: Path, bench_python: str,
            autocast: bool = True, echo=_print) -> list[Row]:
    """Models are made once under `work`; each model's runs, engines and logs go to
    `work/runs/<source>/<quantizer>`, emptied first (kept after for a look, replaced by the next run)."""
    import shutil

    oracle = check.prepare(tmp / "oracle")
    rows = []
    for source in chosen:
        float_path = sources.float_model(source, work, bench_python)
        calibration = sources.calibration_file(source, work)
        for quantizer in quantizers:
            row = Row(source, quantizer)
            try:
                qdq = quantize.quantized_model(quantizer, float_path, calibration, bench_python)
                runs = work / "runs" / source.name / quantizer
                shutil.rmtree(runs, ignore_errors=True)
                one_model(row, qdq, float_path, calibration, runs, oracle, bench_python, autocast)
            except RuntimeError as exc:
                row.error = str(exc)[:400]
            for line in lines(row):
                echo(line)
            rows.append(row)
    good = sum(r.counts for r in rows)
    echo(f"quantized: {good}/{len(rows)} models keep every quantized layer and pass")
    return rows


def one_model(row: Row, qdq: Path, float_path: Path, calibration: Path, work: Path, oracle: dict,
              bench_python: str, autocast: bool) -> None:
    work.mkdir(parents=True, exist_ok=True)
    source_program = quantized_layers.build_program(qdq, work / "source_ctx.onnx", oracle)
    row.source_linear = len(source_program.linear)
    row.source_quantized = sum(op.quantized for op in source_program.linear)
    feed = measure.feed_of(calibration)
    recipes = [None] + ([row.source.fitting_recipe] if row.source.fitting_recipe else [])
    for recipe in recipes:
        result, run = measure.trtpipe(row.source, qdq, float_path, recipe, work)
        if run is not None:
            model = run / "precision" / "model.onnx"
            measure.model_facts(result, model, feed)
            measure.engine_facts(result, source_program, model, quantized_layers.plan_of(run), oracle,
                                 work / f"{recipe or 'default'}_ctx.onnx")
        row.converted.append(result)
    row.derived, _ = measure.trtpipe(row.source, qdq, None, None, work)
    if autocast:
        result = measure.autocast(qdq, work, bench_python)
        if result.ok:
            model = work / "autocast" / "model.onnx"
            measure.model_facts(result, model, feed)
            measure.engine_facts(result, source_program, model, None, oracle, work / "autocast_ctx.onnx")
        row.converted.append(result)


def lines(row: Row) -> list[str]:
    head = f"{row.label:26s} {row.source.description}"
    if row.error:
        return [head, f"    FAILED: {row.error}"]
    out = [head + f"; source engine: {row.source_quantized}/{row.source_linear} linear ops quantized"]
    for c in row.converted:
        if not c.ok:
            out.append(f"    {c.tool:26s} FAILED: {c.error}")
            continue
        engine = c.engine
        if "error" in engine:
            built = f"engine NOT built: {engine['error'][:120]}"
        else:
            built = (f"engine {len(engine['output_quantized'])}/{engine['output_linear']} quantized, lost "
                     f"{len(engine['lost'])}" + (f", planned FP16 run FP32 {len(engine['fell_back'])}"
                                                 if c.tool != "AutoCast" else ""))
        text = (f"    {c.tool:26s} Casts {c.casts:3d} ({c.casts_qdq} next to Q/DQ)  FP16 {100 * c.fp16_share:5.1f}%  "
                f"{built}  {c.seconds:.1f}s")
        if c.tool != "AutoCast":
            verdict = {True: "PASS", False: "FAIL", None: "no verdict"}[c.passed]
            text += (f" (run {c.run_seconds:.1f}s)  exit {c.exit_code} {verdict}; vs the anchor ({c.anchor or '-'}) "
                     f"rel_l2 {_num(c.anchored_rel_l2)} (bound {_num(c.anchored_rel_l2_bound)}); vs the QDQ model "
                     f"rel_l2 {_num(c.rel_l2)} (bound {_num(c.rel_l2_bound)}), codes differ {_pct(c.codes_differ)}; "
                     f"vs float: QDQ {_num(c.float_rel_l2_qdq)}, trtpipe {_num(c.float_rel_l2_candidate)}")
        out.append(text)
        for finding in [*engine.get("lost", []), *engine.get("fell_back", [])][:6]:
            out.append(f"        {finding[:200]}")
    d = row.derived
    if d is not None:
        verdict = {True: "PASS", False: "FAIL", None: "no verdict"}[d.passed]
        out.append(f"    {'trtpipe, derived anchor':26s} exit {d.exit_code} {verdict}; vs the anchor "
                   f"({d.anchor or '-'}) rel_l2 {_num(d.anchored_rel_l2)} (bound {_num(d.anchored_rel_l2_bound)}) "
                   "(not counted)")
    return out


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
