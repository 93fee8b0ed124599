"""The search table of docs/precision.md, measured: `python -m bench.search [--record]` (~30 s).

Each case is the real command line, `trtpipe +recipe=transformer_fp16_search model.builtin=M
[validate.tolerance.rel_l2=B]` to the precision stage (the search validates each trial
itself), in a scratch folder with its own cache. Read back from the run: the automatic plan
(trial 1 of `precision/search.json`: FP32 nodes, Casts, FLOP share, passed, worst value), the
chosen trial (same facts), the number of trials, and the search's seconds (the stage's log line
`precision search: N trials in Xs`, wall time on this machine: the load average is recorded).
`--record` writes bench/search/results.json, keys `<case>.<fact>`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# name -> overrides; the names are the result keys' first part (docs/precision.md cites them)
CASES = {
    "transformer": ["model.builtin=transformer"],
    "t5": ["model.builtin=t5"],
    "t5_rel_l2_0.006": ["model.builtin=t5", "validate.tolerance.rel_l2=0.006"],
    "t5_rel_l2_0.004": ["model.builtin=t5", "validate.tolerance.rel_l2=0.004"],
}
SEARCH_SECONDS = re.compile(r"precision search: (\d+) trials in ([\d.]+)s")


def trial_facts(trial: dict) -> dict:
    return {"fp32": trial["fp32_count"], "casts": trial["casts"],
            "flop_share_pct": round(100 * trial["low_precision_flop_share"], 2),
            "passed": int(bool(trial["passed"])), "worst": trial["worst"]["value"]}


def run_case(name: str, overrides: list[str], work: Path) -> dict:
    folder = work / name
    folder.mkdir()
    env = {**os.environ, "TRTPIPE_CACHE": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-m", "trtpipe", "+recipe=transformer_fp16_search", *overrides,
                           "stages=[sanitize,upgrade_opset,precision]", "hydra.run.dir=run"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{name}: trtpipe failed ({done.returncode}): {done.stderr[-800:]}")
    search = json.loads((folder / "run" / "precision" / "search.json").read_text())
    trials = {trial["trial"]: trial for trial in search["trials"]}
    automatic = next(trial for trial in search["trials"] if trial["step"] == "automatic plan")
    chosen = trials[search["chosen"]["trial"]]
    found = SEARCH_SECONDS.search((folder / "run" / "trtpipe.log").read_text())
    facts = {f"automatic.{k}": v for k, v in trial_facts(automatic).items()}
    facts.update({f"chosen.{k}": v for k, v in trial_facts(chosen).items()})
    facts.update({"chosen.trial": chosen["trial"], "trials": int(found.group(1)), "search_s": float(found.group(2))})
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write bench/search/results.json")
    args = parser.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="trtpipe-bench-search-") as scratch:
        for name, overrides in CASES.items():
            facts = run_case(name, overrides, Path(scratch))
            figures.update({f"{name}.{key}": value for key, value in facts.items()})
            print(f"{name:18} automatic {facts['automatic.fp32']} FP32, {facts['automatic.casts']} Casts, "
                  f"{facts['automatic.flop_share_pct']}%, {'passes' if facts['automatic.passed'] else 'fails'} "
                  f"({facts['automatic.worst']:.3g}) | chosen trial {facts['chosen.trial']}: "
                  f"{facts['chosen.fp32']} FP32, {facts['chosen.casts']} Casts, {facts['chosen.flop_share_pct']}% "
                  f"({facts['chosen.worst']:.3g}) | {facts['trials']} trials, {facts['search_s']} s", flush=True)
    if args.record:
        from bench.common.results import write_results
        write_results("search", figures, command="python -m bench.search --record",
                      notes="`worst` is the trial's worst metric value (rel_l2 on these cases); search_s is "
                            "wall time from the stage's log, machine load in environment")
    return 0
