"""Corpus run: every ONNX backend test model through sanitize -> upgrade_opset -> precision -> validate.

    python -m bench.corpus [--limit N] [--filter REGEX] [--workers 2] [--timeout 60] [--json out.json]

Each model is classified (`corpus_case.py` defines the outcomes): `passed`,
`rejected` (a clear one-line UserError), `skipped` (ONNX Runtime cannot run
the original model) or `defect`. Prints the counts per outcome and category,
the defects grouped by class with an example model each, and the rejection
messages grouped the same way (a rejection is only acceptable if its message
names the problem, so they are printed for review). Exit code 1 when any
defect was found.

The corpus is the installed onnx's: `node` (generated once into a cache
directory when the wheel does not ship the data, see `corpus_data.py`) and
`light`. Workers and time limits: `corpus_pool.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.corpus.corpus_data import KINDS, list_cases
from bench.corpus.corpus_pool import run_cases

OUTCOMES = ("passed", "rejected", "skipped", "defect")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cases = list_cases(args.data_dir, kinds=args.kinds.split(","))
    if args.filter:
        pattern = re.compile(args.filter)
        cases = [case for case in cases if pattern.search(case.name)]
    if args.limit:
        cases = cases[: args.limit]
    if not cases:
        print("no case matches", file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = run_cases(cases, workers=args.workers, timeout=args.timeout, on_result=_progress(args.quiet))
    seconds = time.perf_counter() - start
    results.sort(key=lambda record: (record["kind"], record["name"]))
    print_summary(results, seconds, args.workers)
    if args.json:
        document = {"seconds": round(seconds, 1), "workers": args.workers, "timeout": args.timeout,
                    "counts": dict(Counter(r["outcome"] for r in results)), "results": results}
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
    if args.record:
        _record(results, seconds, args)
    return 1 if any(r["outcome"] == "defect" for r in results) else 0


def _record(results: list[dict], seconds: float, args) -> None:
    """bench/corpus/results.json: `models`, `seconds`, `workers`, `<outcome>` counts and
    `<outcome>.<category>` counts (the category as print_summary shows it)."""
    from bench.common.results import write_results

    figures = {"models": len(results), "seconds": round(seconds, 1), "workers": args.workers}
    counts = Counter(r["outcome"] for r in results)
    figures.update({outcome: counts.get(outcome, 0) for outcome in OUTCOMES})
    for (outcome, category), count in Counter((r["outcome"], _short_category(r)) for r in results).items():
        figures[f"{outcome}.{category}"] = count
    write_results("corpus", figures, command="python -m bench.corpus --record",
                  notes="the installed onnx's backend test models; seconds is wall time (load in environment)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (after --filter)")
    parser.add_argument("--filter", help="only cases whose name matches this regex (re.search)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it is a hang")
    parser.add_argument("--json", help="write every case's record to this file")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {KINDS}")
    parser.add_argument("--data-dir", type=Path, help="a backend data directory with node/ (and light/)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--record", action="store_true",
                        help="also write bench/corpus/results.json (the figures docs/reliability.md cites)")
    return parser


def _progress(quiet: bool):
    def report(record: dict, done: int, total: int) -> None:
        if not quiet:
            print(f"\r{done}/{total} {record['outcome']:<8} {record['name'][:60]:<60}", end="",
                  file=sys.stderr, flush=True)
            if done == total:
                print(file=sys.stderr)
    return report


def print_summary(results: list[dict], seconds: float, workers: int) -> None:
    counts = Counter(r["outcome"] for r in results)
    print(f"\n{len(results)} models in {seconds:.0f} s with {workers} workers")
    for outcome in OUTCOMES:
        print(f"  {outcome:<9} {counts.get(outcome, 0):>5}")
    print("\nBy category")
    for (outcome, category), count in sorted(Counter(
            (r["outcome"], _short_category(r)) for r in results).items(),
            key=lambda item: (OUTCOMES.index(item[0][0]), -item[1])):
        print(f"  {outcome:<9} {count:>5}  {category}")
    for outcome in ("defect", "rejected", "skipped"):
        groups = group_by_class(r for r in results if r["outcome"] == outcome)
        if groups:
            print(f"\n{outcome.capitalize()} classes ({len(groups)})")
            for (stage, category), members in groups:
                example = members[0]
                print(f"  [{len(members)}] {stage}: {category}\n      e.g. {example['name']}: {example['message'][:300]}")


def _short_category(record: dict) -> str:
    if record["outcome"] in ("passed", "skipped"):
        return re.sub(r": ONNX Runtime cannot run the original:.*\)$", ": ONNX Runtime cannot run the original)",
                      record["category"])
    return record["stage"] or "-"


def group_by_class(records) -> list[tuple[tuple[str, str], list[dict]]]:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["stage"], record["category"])].append(record)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


if __name__ == "__main__":
    sys.exit(main())
