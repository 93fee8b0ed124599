"""Precision's repair measured: `python -m bench.repair [--record] [--only NAME ...] [--torch-python PATH]`.

Each case is the real command line, twice in one scratch folder with one cache: with the repair
(as shipped) and with `precision.repair.enabled=false` (the behaviour before it), both to the
validate stage (no build: no TensorRT here). Read back per case: the automatic plan and the
written plan (FP32 nodes, Casts, FLOP share from `precision_plan.json`, the worst metric of the
repair's trials), the repair's trials and the precision stage's seconds (the manifest), both
verdicts, and whether the plan and model are byte for byte those of the run without the repair
(they must be whenever the automatic plan passed).

Cases:
- `*_naive`: the built-in models under `+recipe=naive_fp16` with the repair turned on: no
  protective rule at all, the repair alone must find the plan (no download, seconds);
- issue 30's models: basic-pitch's `nmp.onnx` (default config, trtpipe's default sample data)
  and rembg's `u2netp.onnx` (`nafnet_fp16`), pinned wheels from the package index
  (`bench/wild/wild_models.py`); T5 v1.1 encoders with massive channels exported by
  `t5_outliers.py` under `transformer_fp16`, weight seeds 0-3 (the export needs torch and
  transformers: `--torch-python` names an interpreter that has them; without one these cases are
  skipped and say so).
`--record` writes bench/repair/results.json, keys `<case>.<fact>`; seconds are wall time on this
machine (its load is recorded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"
T5_SEEDS = (0, 1, 2, 3)


def cases(work: Path, torch_python: str | None, only: list[str] | None) -> dict[str, list[str]]:
    """name -> overrides of the selected cases (models fetched, T5s exported, only for those)."""
    from bench.wild.wild_models import fetch

    wanted = lambda name: not only or name in only  # noqa: E731
    found = {
        "transformer_naive": lambda: ["+recipe=naive_fp16", "precision.repair.enabled=true"],
        "t5_naive": lambda: ["+recipe=naive_fp16", "model.builtin=t5", "precision.repair.enabled=true"],
        "nafnet_naive": lambda: ["+recipe=naive_fp16", "model.builtin=nafnet", "precision.repair.enabled=true"],
        "basic_pitch": lambda: [f"model.path={fetch('basic_pitch')}",
                                "+data.inputs={serving_default_input_2\\:0:{shape:[1,43844,1]}}"],
        "u2netp": lambda: ["+recipe=nafnet_fp16", f"model.path={fetch('u2netp')}"],
    }
    found = {name: make() for name, make in found.items() if wanted(name)}
    python = torch_python or (sys.executable if _has_torch(sys.executable) else None)
    for seed in T5_SEEDS:
        if not wanted(f"t5_outliers_{seed}"):
            continue
        if python is None:
            print(f"t5_outliers_{seed}: skipped (no interpreter with torch and transformers: --torch-python PATH)")
            continue
        folder = work / f"t5_export_{seed}"
        subprocess.run([python, "-m", "bench.repair.t5_outliers", str(folder), str(seed)], cwd=REPO, check=True,
                       capture_output=True, text=True)
        found[f"t5_outliers_{seed}"] = ["+recipe=transformer_fp16", f"model.path={folder / 'model.onnx'}",
                                        f"data.path={folder / 'inputs.npz'}"]
    return found


def _has_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch, transformers"], capture_output=True).returncode == 0


def _run(folder: Path, name: str, overrides: list[str]) -> tuple[int, Path]:
    env = {**os.environ, "TRTPIPE_CACHE": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-m", "trtpipe", *overrides, STAGES, f"hydra.run.dir={name}"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{folder.name}/{name}: trtpipe exited {done.returncode}: {done.stderr[-800:]}")
    return done.returncode, folder / name


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trial_facts(trial: dict) -> dict:
    return {"fp32": trial["fp32_count"], "casts": trial["casts"],
            "flop_share_pct": round(100 * trial["low_precision_flop_share"], 2),
            "worst_metric": trial["worst"]["metric"], "worst": trial["worst"]["value"]}


def run_case(name: str, overrides: list[str], work: Path) -> dict:
    folder = work / name
    folder.mkdir()
    code, run = _run(folder, "repair", overrides)
    old_code, old = _run(folder, "without", [*overrides, "precision.repair.enabled=false"])
    plan = json.loads((run / "precision" / "precision_plan.json").read_text())
    stages = {stage["name"]: stage for stage in json.loads((run / "manifest.json").read_text())["stages"]}
    totals = plan["totals"]
    facts = {"passed": int(code == 0), "passed_without": int(old_code == 0),
             "precision_s": round(stages["precision"]["seconds"], 2),
             "fp32": totals["nodes"].get("fp32", 0), "casts": totals["casts_added"],
             "flop_share_pct": round(100 * totals["low_precision_flop_share"], 2)}
    repair = plan.get("repair")
    if repair is None:  # the automatic plan passed: nothing may differ from the run without the repair
        same = all(_digest(run / "precision" / f) == _digest(old / "precision" / f)
                   for f in ("model.onnx", "precision_plan.json"))
        facts.update(repaired=0, trials=1, unchanged=int(same))
        return facts
    facts.update(repaired=int(repair["repaired"]), trials=len(repair["trials"]), added=len(repair["added_fp32"]))
    facts.update({f"before.{k}": v for k, v in _trial_facts(repair["before"]).items()})
    if repair["after"]:
        facts.update({f"after.{k}": v for k, v in _trial_facts(repair["after"]).items()})
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write bench/repair/results.json")
    parser.add_argument("--only", nargs="*", help="run only these cases")
    parser.add_argument("--torch-python", help="a Python with torch and transformers, for the T5 export")
    args = parser.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="trtpipe-bench-repair-") as scratch:
        for name, overrides in cases(Path(scratch), args.torch_python, args.only).items():
            facts = run_case(name, overrides, Path(scratch))
            figures.update({f"{name}.{key}": value for key, value in facts.items()})
            if "before.fp32" in facts:
                after = (f"{facts['after.fp32']} FP32, {facts['after.casts']} Casts, {facts['after.flop_share_pct']}% "
                         f"({facts['after.worst_metric']} {facts['after.worst']:.4g})" if facts["repaired"]
                         else "no passing plan")
                line = (f"automatic {facts['before.fp32']} FP32, {facts['before.casts']} Casts, "
                        f"{facts['before.flop_share_pct']}% ({facts['before.worst_metric']} {facts['before.worst']:.4g}, "
                        f"fails) -> {after} | {facts['trials']} trials, {facts['precision_s']} s")
            else:
                line = (f"automatic plan passes ({facts['fp32']} FP32, {facts['flop_share_pct']}%): no repair, "
                        f"{'byte for byte' if facts['unchanged'] else 'DIFFERENT from'} the run without it")
            verdict = f"exit {'0' if facts['passed'] else '1'} (without the repair: {'0' if facts['passed_without'] else '1'})"
            print(f"{name:20} {line} | {verdict}", flush=True)
    if args.record:
        from bench.common.results import write_results
        write_results("repair", figures, command="python -m bench.repair --record --torch-python PATH",
                      notes="before = the automatic plan (trial 1), after = the written plan; worst is the trial's "
                            "metric closest to (or furthest past) its bound; precision_s is wall time (load recorded)")
    return 0
