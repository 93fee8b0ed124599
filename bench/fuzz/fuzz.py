"""`python -m bench.fuzz --cases N [--kind manifest|cache|override|graph|all] [--seed S]`:
the fuzzer of tests/fuzz/ run longer, outside pytest (issue 13, item 12).

Prints, per kind, the cases tried, the defects found (a property violated; the first few
examples are printed) and the seconds taken; exits 1 when any defect was found.

Decisions:
- The same Hypothesis strategies and checks as the test suite (bench/fuzz/fuzz_cases.py,
  bench/fuzz/fuzz_graphs.py), driven by `given` programmatically with a seed: a run is
  reproducible from its `--seed`, and a defect does not stop the run (it is counted).
- `--kind all` splits N by cost: graph mutations (~0.4 s each, a real pipeline run)
  get 2%, config overrides (~0.15 s, a Hydra compose) 15%, manifests (~0.1 s; a few
  pass the checks and are rebuilt) 20%, cache records (~20 ms) the remaining 63%.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("manifest", "cache", "override", "graph")
SHARE = {"graph": 0.02, "override": 0.15, "manifest": 0.2, "cache": 0.63}


def strategy_and_check(kind: str, root: Path):
    from bench.fuzz import fuzz_cases as fc

    if kind == "manifest":
        return fc.manifests(fc.recorded_manifest(root / "base")), fc.check_manifest
    if kind == "cache":
        return fc.cache_records(fc.genuine_record(root / "base")), fc.check_cache_record
    if kind == "override":
        return fc.override_lists(fc.schema_keys()), fc.check_overrides
    from bench.fuzz import fuzz_graphs as fg

    return fg.mutated_models(), fg.check_graph


def fuzz(kind: str, cases: int, seed: int, root: Path) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as with_seed

    strategy, check = strategy_and_check(kind, root)
    tried, defects = 0, []

    @with_seed(seed)
    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(case):
        nonlocal tried
        tried += 1
        workdir = Path(tempfile.mkdtemp(dir=root))
        try:
            problem = check(case, workdir)
        except Exception as error:  # noqa: BLE001 - a property check that crashes is a defect too
            problem = f"{type(error).__name__} in the check: {str(error)[:200]}"
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if problem:
            defects.append((problem, case))

    start = time.perf_counter()
    one()
    return {"kind": kind, "cases": tried, "defects": defects, "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases in total (split by cost with --kind all)")
    parser.add_argument("--kind", choices=(*KINDS, "all"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("trtpipe").addHandler(logging.NullHandler())  # the cases' warnings are expected
    plan = {k: max(1, int(args.cases * SHARE[k])) for k in KINDS} if args.kind == "all" else {args.kind: args.cases}
    root = Path(tempfile.mkdtemp(prefix="trtpipe-fuzz-"))
    (root / "base").mkdir()
    reports = []
    try:
        for kind, cases in plan.items():
            report = fuzz(kind, cases, args.seed, root)
            reports.append(report)
            print(f"{kind:9} cases {report['cases']:6}  defects {len(report['defects']):3}  "
                  f"{report['seconds']:7.1f} s", flush=True)
            for problem, case in report["defects"][:3]:
                print(f"    defect: {problem}\n      case: {str(case)[:300]}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total = sum(r["cases"] for r in reports)
    found = sum(len(r["defects"]) for r in reports)
    print(f"total     cases {total:6}  defects {found:3}  {sum(r['seconds'] for r in reports):7.1f} s (seed {args.seed})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
