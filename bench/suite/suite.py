"""How long the tests take: `python -m bench.suite [--record] [--tier fast|all ...]`.

Runs, from this checkout, the README's test command (`pytest`: every test, in parallel) and
CONTRIBUTING.md's fast tier (`pytest -m "not slow"`), one after the other, each in a fresh
process with the same interpreter, and records per tier the wall time, the tests passed,
skipped and deselected, and the machine's load before and after (the figure is only as good as
the machine was quiet: the README quotes it with the core count it was measured on).
`--record` writes bench/suite/results.json; keys `<tier>.wall_s`, `<tier>.passed`, ...
`--tier ray` times the Ray sweep tests alone (`pytest -m ray`, in an environment with the ray extra).
Why a benchmark and not a note: the README's "how long" is a figure like any other, and a
figure is rerun, not remembered.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `ray`: the Ray sweep tests alone (tests/sweep_ray/, marked `ray`), as CI runs them within `all`.
TIERS = {"all": [], "fast": ["-m", "not slow"], "ray": ["-m", "ray"]}
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def run_tier(name: str) -> dict:
    """One tier's pytest run: wall seconds and the counts of its last summary line."""
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[name]],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(summary)}
    if done.returncode != 0:
        failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        raise SystemExit(f"bench.suite: tier {name!r} did not pass (exit {done.returncode}): {summary}\n"
                         + "\n".join(failed))
    return {"wall_s": round(wall, 1), "wall_min": round(wall / 60, 1), "passed": counts.get("passed", 0),
            "skipped": counts.get("skipped", 0), "deselected": counts.get("deselected", 0),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write bench/suite/results.json")
    parser.add_argument("--tier", nargs="*", choices=sorted(TIERS), default=["all", "fast"])
    args = parser.parse_args(argv)
    figures = {"cpus": os.cpu_count()}
    for name in args.tier:
        facts = run_tier(name)
        figures.update({f"{name}.{key}": value for key, value in facts.items()})
        print(f"{name:5} {facts['wall_min']} min ({facts['wall_s']} s): {facts['passed']} passed, "
              f"{facts['skipped']} skipped, {facts['deselected']} deselected (load {facts['load_before']} -> "
              f"{facts['load_after']})", flush=True)
    if args.record:
        from bench.common.results import write_results
        # Only the tiers run now are replaced: `--tier ray` keeps the other tiers' figures.
        write_results("suite", figures, command="python -m bench.suite --record",
                      owns=lambda key: key == "cpus" or key.split(".")[0] in args.tier,
                      notes="wall time of `pytest` (README) and `pytest -m 'not slow'` (CONTRIBUTING.md), one "
                            "after the other on this machine; load averages are 1-minute, before and after")
    return 0
