"""Run trtpipe on the models from the wild, as a new user would.

    python -m bench.wild [--only NAME ...] [--recipes NAME ...] [--jobs N] [--timeout S] [--markdown bench/wild/WILD.md] [--record]

For each catalogued model (`bench/wild/wild_models.py`): the trtpipe command line with the
default config, and again with the model's fitting recipe (when it has one), each in a
fresh cache and run directory under one temporary root, with a per-run timeout.
`--recipes` runs further shipped recipes on every selected model (e.g. `nafnet_fp16` on the
image models: does a recipe hold on the architectures it names?). One
table on the console; the same table, the environment and the failure classes in
Markdown (`--markdown`, default bench/wild/WILD.md).

Verdicts (decided in `classify`, each with its reason):
- `passed`: exit 0.
- `validation failed`: exit 1 from the validate stage (the plan ran and was judged).
- `refused`: exit 2 or a stage's own error, with trtpipe's one-line message.
- `defect`: a traceback (console or trtpipe.log), a crash (no JSON line, a signal, an
  exit code other than 0/1/2), a timeout, or an exit 2 that blames the user for
  something trtpipe did: it calls a valid model invalid, refuses sample data that ONNX
  Runtime runs the original model on, or stops on a rule the user did not write.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.wild.wild_check import OriginalFacts, original_facts, output_notes
from bench.wild.wild_models import BY_NAME, MODELS, WildModel, fetch

REPO = Path(__file__).resolve().parents[2]

# Settings of the benchmark itself, the same for every model (not tuning): one sample
# set keeps the corpus run within minutes on a 2-core machine.
BENCH_OVERRIDES = ("data.iterations=1",)

STAGES = ("sanitize", "upgrade_opset", "precision", "build", "validate")


@dataclass
class RunOutcome:
    model: str
    package: str
    config: str
    exit_code: int | None
    seconds: float
    stages: dict[str, str] = field(default_factory=dict)
    flop_share: float | None = None
    casts: int | None = None
    fp32_nodes: int | None = None
    repair: str = ""  # what precision's repair did: "" (the plan passed as decided), "+N FP32, 94.1%->92.7%", "none passed"
    repair_added: int | None = None  # FP32 nodes the repair added (None: it did not run)
    repair_trials: int | None = None
    verdict: str = ""
    defect: bool = False
    message: str = ""
    failed_stage: str = ""
    traceback_tail: str = ""
    notes: list[str] = field(default_factory=list)
    run_dir: str = ""


def command(model: WildModel, path: Path, recipe: str | None, root: Path) -> list[str]:
    overrides = [f"model.path={path}", f"cache.dir={root / 'cache'}", f"hydra.run.dir={root / 'run'}"]
    if recipe:
        overrides.append(f"+recipe={recipe}")
    return [sys.executable, "-m", "trtpipe", "--json", *overrides, *model.overrides, *BENCH_OVERRIDES]


def _json_line(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _traceback(text: str) -> str:
    """The exception line and the innermost frame of the last traceback in `text`, or ''."""
    at = text.rfind("Traceback (most recent call last)")
    if at < 0:
        return ""
    lines = [ln for ln in text[at:].splitlines()[1:] if ln.strip()]
    frames = [ln.strip() for ln in lines if ln.lstrip().startswith('File "')]
    end = next((ln.strip() for ln in lines if not ln.startswith(" ")), lines[-1].strip() if lines else "")
    return f"{end} (at {frames[-1]})" if frames else end


def _plan_totals(run_dir: Path, outcome: RunOutcome) -> None:
    plan = run_dir / "precision" / "precision_plan.json"
    if not plan.is_file():
        return
    document = json.loads(plan.read_text())
    totals = document.get("totals", {})
    repair = document.get("repair")
    if repair:
        outcome.repair_added, outcome.repair_trials = len(repair["added_fp32"]), len(repair["trials"])
        before, after = repair["before"], repair.get("after")
        outcome.repair = (f"+{len(repair['added_fp32'])} FP32, {before['low_precision_flop_share']:.1%}->"
                          f"{after['low_precision_flop_share']:.1%}, {len(repair['trials'])} trials"
                          if repair["repaired"] else f"none passed in {len(repair['trials'])} trials")
    outcome.flop_share = totals.get("low_precision_flop_share")
    outcome.casts = totals.get("casts_added")
    outcome.fp32_nodes = totals.get("nodes", {}).get("fp32", 0)


def _failure(run_dir: Path, report: dict) -> tuple[str, str]:
    """(stage, message) of the first failed stage, from the manifest; else the JSON error."""
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        for stage in json.loads(manifest.read_text()).get("stages", []):
            if stage.get("status") == "failed":
                return stage["name"], stage.get("error") or ""
    return "", report.get("error") or ""


_BLAMES_MODEL = re.compile(r"invalid|checker|ValidationError|not a valid|malformed|corrupt", re.I)
_ABOUT_DATA = re.compile(r"data\.inputs|sample (data|input)|does not fit", re.I)
_UNMATCHED_RULE = re.compile(r"matches nothing|matched nothing|match(es)? no node", re.I)


def classify(outcome: RunOutcome, facts: OriginalFacts, recipe: str | None, timed_out: bool) -> None:
    """Set verdict and defect. Decision: the rules below, in this order."""
    code = outcome.exit_code
    if timed_out:
        outcome.verdict, outcome.defect = "defect: timeout", True
    elif code is None or code not in (0, 1, 2):
        outcome.verdict, outcome.defect = f"defect: crash (exit {code})", True
    elif outcome.traceback_tail or "(traceback in " in outcome.message:
        outcome.verdict, outcome.defect = "defect: exception", True
    elif code == 0:
        outcome.verdict = "passed"
    elif code == 1 and outcome.failed_stage == "validate":
        outcome.verdict = "validation failed"
    elif code == 2 and facts.valid and _BLAMES_MODEL.search(outcome.message):
        # Decision: the original passes the full checker and runs in ONNX Runtime, so a
        # message calling it invalid describes what a trtpipe pass did to it.
        outcome.verdict, outcome.defect = "defect: blames a valid model", True
    elif code == 2 and facts.ort_runs and _ABOUT_DATA.search(outcome.message):
        # Decision: ONNX Runtime ran the original on exactly these shapes and ranges.
        outcome.verdict, outcome.defect = "defect: refuses data ORT accepts", True
    elif code == 2 and recipe and _UNMATCHED_RULE.search(outcome.message):
        # Decision: the user wrote no rule; a shipped recipe's own rule matching nothing
        # is the recipe's problem (issue 12, item 7).
        outcome.verdict, outcome.defect = "defect: recipe rule matches nothing", True
    else:
        outcome.verdict = "refused" if code == 2 else f"stage failed ({outcome.failed_stage or '?'})"


def run_one(model: WildModel, recipe: str | None, facts: OriginalFacts, root: Path, timeout: float) -> RunOutcome:
    work = root / f"{model.name}-{recipe or 'default'}"
    work.mkdir(parents=True)
    outcome = RunOutcome(model.name, model.package, recipe or "default", None, 0.0, run_dir=str(work / "run"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("TRTPIPE_CACHE", None)
    started = time.perf_counter()
    timed_out, stdout, stderr = False, "", ""
    try:
        proc = subprocess.run(command(model, fetch(model.name), recipe, work), cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)
        outcome.exit_code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as expired:
        timed_out = True
        stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else (expired.stderr or "")
    outcome.seconds = round(time.perf_counter() - started, 1)
    report = _json_line(stdout) or {}
    if report.get("exit_code") is not None and outcome.exit_code is None:
        outcome.exit_code = report["exit_code"]
    for stage in report.get("stages", []):
        outcome.stages[stage["name"]] = stage["status"]
    run_dir = Path(report.get("run_dir") or work / "run")
    _plan_totals(run_dir, outcome)
    outcome.notes = output_notes(run_dir)
    outcome.failed_stage, outcome.message = _failure(run_dir, report)
    log = run_dir / "trtpipe.log"
    outcome.traceback_tail = _traceback(stderr) or (_traceback(log.read_text(errors="replace")) if log.is_file() else "")
    if timed_out:
        outcome.message = f"no result within {timeout:.0f} s"
    elif not report:
        outcome.message = outcome.message or (stderr.strip().splitlines() or ["no output"])[-1]
    classify(outcome, facts, recipe, timed_out)
    return outcome


def run_corpus(models: list[WildModel], jobs: int, timeout: float, root: Path,
               recipes: tuple[str, ...] = ()) -> tuple[list[RunOutcome], dict]:
    facts = {m.name: original_facts(fetch(m.name), m.overrides) for m in models}
    work = [(m, r) for m in models for r in dict.fromkeys((None, m.recipe, *recipes))]
    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        done = [pool.submit(run_one, m, r, facts[m.name], root, timeout) for m, r in work]
        outcomes = [f.result() for f in done]
    return outcomes, facts


def main(argv: list[str] | None = None) -> int:
    from bench.wild.wild_report import console_table, environment, markdown, result_figures

    parser = argparse.ArgumentParser(prog="python -m bench.wild", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(BY_NAME), help="models to run")
    parser.add_argument("--recipes", nargs="+", default=[], metavar="NAME",
                        help="also run these shipped recipes on every selected model")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run (default 300)")
    parser.add_argument("--markdown", type=Path, default=REPO / "bench" / "wild" / "WILD.md",
                        help="where to write the Markdown report ('-' for none)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories (path printed)")
    parser.add_argument("--record", action="store_true",
                        help="also write bench/wild/results.json (the figures docs/wild.md cites)")
    args = parser.parse_args(argv)
    models = [BY_NAME[n] for n in args.only] if args.only else list(MODELS)
    for m in models:  # download first, so a network problem shows before any run
        fetch(m.name)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="trtpipe-wild-"))
    outcomes, facts = run_corpus(models, args.jobs, args.timeout, root, tuple(args.recipes))
    total = time.perf_counter() - started
    print(console_table(outcomes))
    print(f"{len(outcomes)} runs on {len(models)} models in {total:.0f} s; "
          f"{sum(o.defect for o in outcomes)} defect(s)")
    if str(args.markdown) != "-":
        args.markdown.write_text(markdown(outcomes, models, facts, environment(REPO), total, BENCH_OVERRIDES))
        print(f"report: {args.markdown}")
    if args.record:
        from bench.common.results import write_results
        write_results("wild", result_figures(outcomes, models, total), command="python -m bench.wild --record",
                      notes="one run per model and config, fresh cache each; shares in percent")
    if args.keep:
        print(f"run directories: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if any(o.defect for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
