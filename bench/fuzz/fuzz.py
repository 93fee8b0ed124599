"""`python -m bench.fuzz --cases N [--kind KIND[,KIND...]|all] [--seed S] [--mutation NAME ...]`:
the fuzzer of tests/fuzz/ run longer, outside pytest (issue 13 item 12, issue 22).

Kinds: manifest, cache, override, graph (Hypothesis, in-process), verify (Hypothesis, in-process:
hostile manifests and run directories given to trtpipe-verify, bench/fuzz/fuzz_verify.py; a
rebuild per case that passes the checks, so it is named explicitly like the scenario kinds and
is not part of `all`) and the scenario kinds fs
(the file system around a real run: links, hard links, FIFOs, devices, corrupt external-data
fields, the cache layout, run directories) and sweep (multiruns with failing, killed and
interrupted jobs), bench/fuzz/fuzz_scenarios.py.

Prints, per kind, the cases tried, the defects found (a property violated; the first few
examples are printed) and the seconds taken; exits 1 when any defect was found.

Decisions:
- The same Hypothesis strategies and checks as the test suite (bench/fuzz/fuzz_cases.py,
  bench/fuzz/fuzz_graphs.py), driven by `given` programmatically with a seed: a run is
  reproducible from its `--seed`, and a defect does not stop the run (it is counted).
- `--kind all` splits N by cost: graph mutations (~0.4 s each, a real pipeline run)
  get 2%, config overrides (~0.15 s, a Hydra compose) 15%, manifests (~0.1 s; a few
  pass the checks and are rebuilt) 20%, cache records (~20 ms) the remaining 63%.
  `all` means these four; the scenario kinds (seconds per case: a subprocess per run)
  are named explicitly, e.g. `--kind fs,sweep`, and get N each.
- Scenario defects are counted per category (the mutation, with the issue item it finds).
- `--record` merges this run's kinds into bench/fuzz/results.json (docs/figures.md): per kind
  and seed `runs.<kind>.seed<S>.cases`, `.defects`, `.seconds`, `.load_1min` (the machine's load
  when the kind ended); per kind the sums over its seeds (`<kind>.cases`, ..., `.per_case_s`);
  the totals of the in-process kinds (`inprocess.*`) and of the scenario kinds (`scenarios.*`).
  Merged, not overwritten: a long run is made as several `--kind`/`--seed` parts (in parallel,
  or on several machines), and each part records itself; the same kind and seed recorded again
  replaces its earlier figures. `--record-log LOG...` records finished runs from their printed
  summary lines instead (a run started without `--record`).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("manifest", "cache", "override", "graph")
SCENARIOS = ("fs", "sweep")
EXTRA = ("verify",)   # in-process, named explicitly (not in `all`), recorded as a group of its own
SHARE = {"graph": 0.02, "override": 0.15, "manifest": 0.2, "cache": 0.63}


def strategy_and_check(kind: str, root: Path):
    from bench.fuzz import fuzz_cases as fc

    if kind == "manifest":
        return fc.manifests(fc.recorded_manifest(root / "base")), fc.check_manifest
    if kind == "cache":
        return fc.cache_records(fc.genuine_record(root / "base")), fc.check_cache_record
    if kind == "override":
        return fc.override_lists(fc.schema_keys()), fc.check_overrides
    if kind == "verify":
        from bench.fuzz import fuzz_verify as fv

        fv.recorded_run(root)
        return fv.cases(), fv.check_verify
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


def scenarios(kind: str, cases: int, seed: int, root: Path, only: tuple[str, ...], verbose: bool) -> dict:
    from bench.fuzz import fuzz_scenarios as fs

    def progress(case: dict, defects: list) -> None:  # one line per case: a long run can be read while it runs
        verdict = f"defect: {str(defects[0])[:200]}" if defects else "ok"
        print(f"    case {case['seed']:>9} {case['mutation']:24} {verdict}", flush=True)

    start = time.perf_counter()
    results = fs.run_cases(kind, cases, seed, root, only, progress if verbose else None)
    per: dict[str, list] = {}
    for case, defects in results:
        per.setdefault(case["mutation"], [0, []])
        per[case["mutation"]][0] += 1
        per[case["mutation"]][1] += [(d, case) for d in defects[:1]]  # a case counts once, by its first defect
    return {"kind": kind, "cases": len(results), "defects": [d for _, found in per.values() for d in found],
            "seconds": time.perf_counter() - start, "categories": per}


def print_categories(report: dict) -> None:
    from bench.fuzz.fuzz_scenarios import ITEMS

    for name, (tried, found) in sorted(report["categories"].items()):
        print(f"    {name:24} item {ITEMS.get(name, '?'):9} cases {tried:4}  defects {len(found):4}", flush=True)
        if found:
            print(f"        e.g. {str(found[0][0])[:300]}  (case {found[0][1]['seed']})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases in total (split by cost with --kind all)")
    parser.add_argument("--kind", default="all", help=f"all, or a comma list of {', '.join(KINDS + EXTRA + SCENARIOS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutation", action="append", default=[],
                        help="fs/sweep: only these mutations (repeatable; default every one, in turn)")
    parser.add_argument("--verbose", action="store_true", help="fs/sweep: a line per case as it ends")
    parser.add_argument("--record", action="store_true", help="merge this run's figures into bench/fuzz/results.json")
    parser.add_argument("--record-log", nargs="+", type=Path, metavar="LOG",
                        help="record finished runs from their printed output instead of running")
    args = parser.parse_args(argv)
    if args.record_log:
        record_logs(args.record_log)
        return 0
    kinds = [k.strip() for k in args.kind.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in (*KINDS, *EXTRA, *SCENARIOS, "all")]
    if unknown:
        parser.error(f"unknown kind(s) {unknown}; choose from all, {', '.join(KINDS + EXTRA + SCENARIOS)}")
    if args.mutation:
        from bench.fuzz.fuzz_scenarios import ITEMS

        wrong = [m for m in args.mutation if m not in ITEMS]
        if wrong:
            parser.error(f"unknown mutation(s) {wrong}; choose from {', '.join(sorted(ITEMS))}")
    logging.getLogger("trtpipe").addHandler(logging.NullHandler())  # the cases' warnings are expected
    plan = {}
    for kind in kinds:
        plan.update({k: max(1, int(args.cases * SHARE[k])) for k in KINDS} if kind == "all" else {kind: args.cases})
    root = Path(tempfile.mkdtemp(prefix="trtpipe-fuzz-"))
    (root / "base").mkdir()
    reports = []
    try:
        for kind, cases in plan.items():
            report = (scenarios(kind, cases, args.seed, root, tuple(args.mutation), args.verbose) if kind in SCENARIOS
                      else fuzz(kind, cases, args.seed, root))
            report["load"] = os.getloadavg()[0]
            reports.append(report)
            print(f"{kind:9} cases {report['cases']:6}  defects {len(report['defects']):3}  "
                  f"{report['seconds']:7.1f} s", flush=True)
            if kind in SCENARIOS:
                print_categories(report)
                continue
            for problem, case in report["defects"][:3]:
                print(f"    defect: {problem}\n      case: {str(case)[:300]}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total = sum(r["cases"] for r in reports)
    found = sum(len(r["defects"]) for r in reports)
    print(f"total     cases {total:6}  defects {found:3}  {sum(r['seconds'] for r in reports):7.1f} s (seed {args.seed})")
    if args.record:
        record(reports, args.seed)
    return 1 if found else 0


def record(reports: list[dict], seed: int) -> None:
    """Merge finished kinds into bench/fuzz/results.json: per run `runs.<kind>.seed<S>.*`, and per kind
    the sums over its recorded seeds (`<kind>.cases`, `.defects`, `.seconds`, `.per_case_s`)."""
    import json

    from bench.common.results import results_path, write_results

    path = results_path("fuzz")
    earlier = json.loads(path.read_text()) if path.exists() else {}
    # a file converted from earlier saved figures (not a run's record) is replaced, never merged into
    figures = {} if "converted_from" in earlier.get("environment", {}) else earlier.get("figures", {})
    for report in reports:
        run = f"runs.{report['kind']}.seed{seed}"
        figures.update({f"{run}.cases": report["cases"], f"{run}.defects": len(report["defects"]),
                        f"{run}.seconds": round(report["seconds"], 1)})
        if report.get("load") is not None:
            figures[f"{run}.load_1min"] = round(report["load"], 2)
    for kind in (*KINDS, *EXTRA, *SCENARIOS):
        runs = sorted({key.rsplit(".", 1)[0] for key in figures if key.startswith(f"runs.{kind}.seed")})
        if not runs:
            continue
        for fact in ("cases", "defects", "seconds"):
            figures[f"{kind}.{fact}"] = round(sum(figures[f"{run}.{fact}"] for run in runs), 1)
        figures[f"{kind}.per_case_s"] = round(figures[f"{kind}.seconds"] / max(1, figures[f"{kind}.cases"]), 3)
    for group, kinds in (("inprocess", KINDS), ("scenarios", SCENARIOS)):
        present = [k for k in kinds if f"{k}.cases" in figures]
        if present:
            figures[f"{group}.cases"] = sum(figures[f"{k}.cases"] for k in present)
            figures[f"{group}.defects"] = sum(figures[f"{k}.defects"] for k in present)
    write_results("fuzz", figures, command="python -m bench.fuzz --cases N --kind K --seed S --record "
                                           "(or --record-log LOG: a finished run's printed summary), merged",
                  notes="per kind: the sums over its recorded seeds (runs.<kind>.seed<S>: one run each, the latest "
                        "recorded replaces an earlier one of the same kind and seed); seconds are each run's wall "
                        "time, load_1min the load average when it ended (absent for runs read from a log)")


SUMMARY = r"^(\w+)\s+cases\s+(\d+)\s+defects\s+(\d+)\s+([\d.]+) s$"
TOTAL = r"^total\s+cases\s+\d+\s+defects\s+\d+\s+[\d.]+ s \(seed (-?\d+)\)$"


def record_logs(paths: list[Path]) -> None:
    """`--record-log`: record finished runs from what they printed (one or more runs per log, each ending
    in its `total ... (seed S)` line), so a long run started without `--record` needs no rerun."""
    import re

    for path in paths:
        pending: list[dict] = []
        for line in path.read_text(errors="replace").splitlines():
            if (found := re.match(SUMMARY, line)) and found.group(1) in (*KINDS, *EXTRA, *SCENARIOS):
                pending.append({"kind": found.group(1), "cases": int(found.group(2)),
                                "defects": [None] * int(found.group(3)), "seconds": float(found.group(4))})
            elif (total := re.match(TOTAL, line)) and pending:
                record(pending, int(total.group(1)))
                pending = []


if __name__ == "__main__":
    sys.exit(main())
