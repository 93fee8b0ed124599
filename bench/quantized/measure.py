"""One quantized model, measured: trtpipe (default config and fitting recipe) and AutoCast side by side.

Per converter output, read off the files (nothing trusts a tool's own summary, except trtpipe's verdict,
which is what is measured):
- `casts`: Cast nodes in the written model; `casts_qdq`: those whose input comes from, or whose output
  feeds, a QuantizeLinear/DequantizeLinear;
- `fp16_share`: of the Conv/Gemm/MatMul FLOPs, the share computed by nodes whose output is FP16
  (bench/autocast/output_facts.py `fp16_flop_share`, the same function for both tools);
- the engines (bench/rtx/quantized_layers.py): the source model's and the output's, built by the real
  TensorRT-RTX 1.7.1 builder; `linear_quantized` source/output, `lost`, and for trtpipe `fell_back`
  (planned FP16 run FP32; AutoCast writes no plan);
- trtpipe only: exit code and verdict (the anchored criterion, trtpipe/validate/anchored.py, anchored
  on `validate.float_model`), whether the emulated candidate is within the recipe's bounds against the
  QDQ model as well (`passed_vs_qdq`, the verdict before the criterion) and its rel_l2 there, its rel_l2
  against the anchor with the widened bound it was judged by, the share of int8/fp8 codes that differ,
  and rel_l2 of the QDQ model and of the candidate against the float model (what quantization costs,
  and what FP16 adds to it);
- `seconds`: trtpipe's conversion (sanitize + upgrade_opset + precision, from its manifest) and its whole
  run (validate included); AutoCast's call and save.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from bench.quantized.sources import Source
from bench.rtx import quantized_layers
from bench.rtx.check import json_tail
from bench.rtx.subjects import _place_left_in_cache as place_left_in_cache

CONVERSION = ("sanitize", "upgrade_opset", "precision")
QDQ = ("QuantizeLinear", "DequantizeLinear")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Converted:
    tool: str                          # "trtpipe default", "trtpipe transformer_fp16", "AutoCast"
    ok: bool = False                   # ran and wrote a model
    error: str = ""
    casts: int = 0
    casts_qdq: int = 0
    fp16_share: float = 0.0
    seconds: float = 0.0               # the conversion
    run_seconds: float = 0.0           # trtpipe: the whole run, validate included
    stage_status: str = ""             # trtpipe: sanitize,upgrade_opset,precision statuses (ran/cached)
    exit_code: int | None = None
    passed: bool | None = None         # trtpipe's verdict (the anchored criterion for a Q/DQ model)
    passed_vs_qdq: bool | None = None  # the emulated candidate within the recipe's bounds against the QDQ model
    rel_l2: float | None = None        # the emulated candidate vs the QDQ model (worst output)
    rel_l2_bound: float | None = None
    anchored_rel_l2: float | None = None        # the emulated candidate vs the anchor (worst output)
    anchored_rel_l2_bound: float | None = None  # the widened bound it is judged by (largest over outputs)
    anchor: str = ""                             # the anchor's source (validate.float_model or derived)
    codes_differ: float | None = None  # share of int8/fp8 codes that differ
    float_rel_l2_qdq: float | None = None        # the QDQ model vs the float model
    float_rel_l2_candidate: float | None = None  # the candidate vs the float model
    engine: dict = field(default_factory=dict)   # quantized_layers facts, or {"error": ...}

    @property
    def keeps_quantized(self) -> bool:
        return bool(self.engine) and "error" not in self.engine and not self.engine["lost"] \
            and not self.engine["fell_back"]


def trtpipe(source: Source, qdq: Path, float_path: Path | None, recipe: str | None,
            work: Path) -> tuple[Converted, Path | None]:
    """trtpipe's CLI, every stage (the build defers: no TensorRT here; the oracle builds afterwards); its
    console output is kept in `work/trtpipe_<config>.log`. `float_path` None: no `validate.float_model`, the
    verdict anchored on the anchor trtpipe derives from the QDQ model (the `derived` config)."""
    config = recipe or ("default" if float_path is not None else "derived")
    tool = f"trtpipe {config}"
    run = work / f"run_{config}"
    command = [sys.executable, "-m", "trtpipe", f"model.path={qdq}",
               *([f"validate.float_model={float_path}"] if float_path is not None else []),
               f"cache.dir={work / ('cache_' + config)}", f"hydra.run.dir={run}", *source.data_overrides()]
    if recipe:
        command.append(f"+recipe={recipe}")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    result = Converted(tool, run_seconds=time.perf_counter() - start, exit_code=done.returncode)
    (work / f"trtpipe_{config}.log").write_text(done.stdout + done.stderr)
    place_left_in_cache(run)   # a failed verdict places no model in the run directory (docs/cache.md)
    model = run / "precision" / "model.onnx"
    if not model.is_file():
        result.error = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1][:300]
        return result, None
    result.ok = True
    # The manifest's per-stage seconds (what the stage lines print); a cached stage would count ~0 s, so
    # each model's runs use a cache of their own and the statuses are kept.
    manifest = json.loads((run / "manifest.json").read_text())
    stages = [s for s in manifest.get("stages", []) if s.get("name") in CONVERSION]
    result.seconds = sum(s.get("seconds") or 0.0 for s in stages)
    result.stage_status = ",".join(s.get("status", "?") for s in stages)
    _validation(result, run / "validate" / "validation.json")
    return result, run


def autocast(qdq: Path, work: Path, bench_python: str) -> Converted:
    result = Converted("AutoCast")
    out = work / "autocast" / "model.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([bench_python, "-m", "bench.quantized.autocast_one", str(qdq), str(out)],
                          capture_output=True, text=True, cwd=REPO)
    status = json_tail(done.stdout)
    if done.returncode != 0 or not out.is_file():
        result.error = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return result
    result.ok, result.seconds = True, status.get("seconds", 0.0)
    return result


def model_facts(result: Converted, model: Path, feed: dict) -> None:
    from bench.autocast.output_facts import fp16_flop_share

    written = onnx.load(str(model))
    result.casts, result.casts_qdq = cast_counts(written)
    result.fp16_share = fp16_flop_share(written, feed)


def cast_counts(model: onnx.ModelProto) -> tuple[int, int]:
    """(Casts, Casts next to a Q/DQ), main graph."""
    producer = {out: node for node in model.graph.node for out in node.output}
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    next_to = [n for n in casts
               if (n.input[0] in producer and producer[n.input[0]].op_type in QDQ)
               or any(r.op_type in QDQ for r in readers.get(n.output[0], []))]
    return len(casts), len(next_to)


def engine_facts(result: Converted, source_program, model: Path, plan: dict | None, oracle: dict, out: Path) -> None:
    try:
        program = quantized_layers.build_program(model, out, oracle)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        result.engine = {"error": str(exc)[:300]}
        return
    layers = quantized_layers.compare(source_program, program, plan)
    result.engine = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(layers).items()}


def feed_of(calibration: Path) -> dict:
    return {name: values[:1] for name, values in np.load(calibration).items()}


def _validation(result: Converted, path: Path) -> None:
    if not path.is_file():
        return
    report = json.loads(path.read_text())
    result.passed = report["passed"]
    emulated = next((c for c in report["candidates"] if c["name"] == "emulated"), None)
    if emulated:
        result.rel_l2 = max(m["rel_l2"] for m in emulated["outputs"].values())
        result.rel_l2_bound = max((b.get("rel_l2") or 0.0) for b in report["bounds"].values()) or None
    quantized = report.get("quantized") or {}
    criterion = quantized.get("criterion") or {}
    anchored = (emulated or {}).get("anchored")
    if emulated:
        result.passed_vs_qdq = not anchored["failed_against_reference"] if anchored else emulated["passed"]
    if anchored and criterion.get("kind") == "anchored":
        result.anchor = criterion["anchor"]["source"]
        result.anchored_rel_l2 = max(m["rel_l2"] for m in anchored["outputs"].values() if m)
        result.anchored_rel_l2_bound = max((b or {}).get("rel_l2") or 0.0
                                           for b in criterion["bounds"].values()) or None
    result.codes_differ = (quantized.get("codes") or {}).get("share")
    for comparison in (quantized.get("float_model") or {}).get("comparisons", []):
        worst = max(m["rel_l2"] for m in comparison["outputs"].values())
        if comparison["name"] == "reference":
            result.float_rel_l2_qdq = worst
        elif comparison["name"] == "emulated":
            result.float_rel_l2_candidate = worst
