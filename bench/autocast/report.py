"""Print the benchmark's tables and judge its targets, every one a ratio measured in the same run.

Targets (issue 16; machines are shared and noisy, so no absolute seconds):
1. whole path / (onnx.load + onnx.save of the raw export) <= 3 on every encoder;
2. linear growth: the whole path's seconds per node on the deepest encoder over
   those on the shallowest encoder of at least 12 layers <= 1.5;
3. AutoCast (matched exclusions) / trtpipe whole path >= 5x on the 24-layer encoder;
4. Casts: trtpipe <= AutoCast with matched exclusions (24-layer encoder), and
   trtpipe's written Casts <= AutoCast's defaults + one Cast per float graph input
   and output that trtpipe keeps in its type and AutoCast's defaults make FP16
   (counted from the two output files), every model;
5. accuracy: no output of trtpipe "worse" than either AutoCast run under the
   paired, noise-aware verdict (paired_accuracy.py: median per-sample rel_l2 ratio
   over 64 held-out inputs, "worse" only when its sign-test 95 % interval lies
   above 1).
Then issue 16's "done when" per model (done_when.py).

Decision: accuracy is judged by the paired verdict, not by the worst of a few
inputs within a fixed tolerance: the former "max_rel within 0.1 %" rule flagged
rounding noise (6 of 20 comparisons) as "worse" (paired_accuracy.py says why).
"""

from __future__ import annotations

import statistics

from bench.autocast.done_when import done_when_rows, print_done_when, verdicts_against
from bench.autocast.paired_accuracy import BETTER, SAME, WORSE

MAX_LOAD_SAVE_RATIO = 3.0
MAX_GROWTH = 1.5
MIN_SPEEDUP_24_LAYERS = 5.0
RUNS = (("autocast_matched", "matched"), ("autocast_defaults", "defaults"))


def print_report(results: list[dict], environment: dict) -> bool:
    """Print everything; True when every target that could be measured passes."""
    print(f"\nAutoCast: {environment['autocast']}; onnx {environment['onnx']}; "
          f"benchmark total {environment['seconds_total']} s")
    _print_time_table(results)
    for run, label in RUNS:
        _print_plan_table(results, run, label)
    _print_accuracy_table(results)
    verdicts = [_target_load_save(results), _target_growth(results), _target_speedup(results),
                _target_casts_matched(results), _target_casts_defaults(results), _target_accuracy(results)]
    print("\nTargets (ratios of this run)")
    for label, text, verdict in verdicts:
        print(f"  {label:<46} {text}  -> {verdict}")
    done = print_done_when(results)
    return all(verdict != "FAIL" for _, _, verdict in verdicts) and done


def _ok(side: dict) -> bool:
    return side.get("status") == "ok"


def _time(side: dict) -> str:
    return f"{side['median']:.3f} ({len(side['seconds'])})" if _ok(side) else "-"


def _ratio(a: dict, b: dict) -> str:
    return f"{a['median'] / b['median']:.2f}" if _ok(a) and _ok(b) else "-"


def _print_header(title: list[str], header: str) -> None:
    """A table's title lines (after a blank line), its header and a rule as wide as the header."""
    print("\n" + "\n".join(title))
    print(header)
    print("-" * len(header))


def _print_time_table(results: list[dict]) -> None:
    _print_header(["Whole path from the raw export, median seconds (runs)"],
                  f"{'model':<16}{'nodes':>6} | {'load+save':>10}{'trtpipe':>14}{'trt/io':>8} | "
                  f"{'AC matched':>14}{'AC defaults':>14} | {'trt/ACm':>8}{'trt/ACd':>8}")
    for r in results:
        io, t, m, d = r["load_save"], r["trtpipe"], r["autocast_matched"], r["autocast_defaults"]
        io_side = {**io, "status": "ok"}
        print(f"{r['model']:<16}{r['nodes']:>6} | {io['median']:>10.4f}{_time(t):>14}{_ratio(t, io_side):>8} | "
              f"{_time(m):>14}{_time(d):>14} | {_ratio(t, m):>8}{_ratio(t, d):>8}")
        for run, label in RUNS:
            status = r[run].get("status", "")
            if not _ok(r[run]) and not status.startswith(("unavailable", "skipped")):
                print(f"{'':<16}AutoCast {label}: {status}")


def _print_plan_table(results: list[dict], run: str, label: str) -> None:
    _print_header([f"Plans: trtpipe (its recipe) / AutoCast {label}"],
                  f"{'model':<16} | {'Casts':>11} | {'FP32 nodes':>11} | {'FP16 FLOPs':>13} | {'excl ok of N':>16}")
    for r in results:
        t, a = r["trtpipe"], r[run]
        if not _ok(t):
            continue
        other = (lambda key: a[key]) if _ok(a) else (lambda key: "-")
        share = f"{t['fp16_flop_share']:.1%}/" + (f"{a['fp16_flop_share']:.1%}" if _ok(a) else "-")
        excl = f"{t['exclusions_honoured']}/{other('exclusions_honoured')} of {r['fp32_requested']}"
        print(f"{r['model']:<16} | {str(t['casts']) + '/' + str(other('casts')):>11} | "
              f"{str(t['fp32_nodes']) + '/' + str(other('fp32_nodes')):>11} | {share:>13} | {excl:>16}")


def _print_accuracy_table(results: list[dict]) -> None:
    _print_header(["Accuracy on held-out inputs under the FP16 emulation: median per-sample rel_l2, and the paired",
                   "ratio trtpipe / AutoCast (median over samples) with its sign-test 95% interval and verdict"],
                  f"{'model':<16}{'output':<20}{'samples':>8} | {'rel_l2 trtpipe / ACm / ACd':>29} | "
                  f"{'vs AC matched':>38} | {'vs AC defaults':>38} | nonfinite")
    for r in results:
        t = r["trtpipe"]
        if not _ok(t):
            continue
        paired = [verdicts_against(r, run) for run, _ in RUNS]
        for name, errors in t["rel_l2_samples"].items():
            medians = [_median(errors), *(_median(r[run]["rel_l2_samples"][name]) if _ok(r[run]) else "-"
                                          for run, _ in RUNS)]
            verdicts = [_paired_text(p[name]) if p else "-" for p in paired]
            bad = "/".join([str(t["accuracy"][name]["nonfinite"]),
                            *(str(r[run]["accuracy"][name]["nonfinite"]) if _ok(r[run]) else "-" for run, _ in RUNS)])
            print(f"{r['model']:<16}{name:<20}{len(errors):>8} | {' / '.join(medians):>29} | "
                  f"{verdicts[0]:>38} | {verdicts[1]:>38} | {bad}")


def _median(errors: list) -> str:
    return f"{statistics.median(float(e) for e in errors):.3g}"


def _paired_text(v) -> str:
    return f"{v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}] {v.verdict}"


def _encoders(results: list[dict]) -> list[tuple[int, dict]]:
    rows = [(int(r["model"].removeprefix("encoder-")), r) for r in results
            if r["model"].startswith("encoder-") and _ok(r["trtpipe"])]
    return sorted(rows, key=lambda row: row[0])


def _target_load_save(results):
    label = f"whole path / (load+save) <= {MAX_LOAD_SAVE_RATIO:g}, encoders"
    rows = _encoders(results)
    if not rows:
        return label, "no encoder measured", "n/a"
    ratios = [(layers, r["trtpipe"]["median"] / r["load_save"]["median"]) for layers, r in rows]
    text = ", ".join(f"{layers}: {ratio:.1f}" for layers, ratio in ratios)
    return label, text, "PASS" if all(ratio <= MAX_LOAD_SAVE_RATIO for _, ratio in ratios) else "FAIL"


def _target_growth(results):
    label = f"linear: s/node deepest / shallowest (>=12) <= {MAX_GROWTH:g}"
    rows = [(layers, r) for layers, r in _encoders(results) if layers >= 12]
    if len(rows) < 2:
        return label, "needs two encoders of >= 12 layers", "n/a"
    (low, first), (high, last) = rows[0], rows[-1]
    per_node = [r["trtpipe"]["median"] / r["nodes"] for r in (first, last)]
    growth = per_node[1] / per_node[0]
    return (label, f"{high} vs {low} layers: {1e3 * per_node[1]:.2f} / {1e3 * per_node[0]:.2f} ms per node "
            f"= {growth:.2f}", "PASS" if growth <= MAX_GROWTH else "FAIL")


def _target_speedup(results):
    label = f"encoder-24 AutoCast matched / trtpipe >= {MIN_SPEEDUP_24_LAYERS:g}x"
    row = next((r for r in results if r["model"] == "encoder-24"), None)
    if row is None or not _ok(row["autocast_matched"]):
        return label, "AutoCast " + (row["autocast_matched"]["status"] if row else "not measured"), "n/a"
    speedup = row["autocast_matched"]["median"] / row["trtpipe"]["median"]
    return label, f"{speedup:.1f}x", "PASS" if speedup >= MIN_SPEEDUP_24_LAYERS else "FAIL"


def _target_casts_matched(results):
    label = "Casts trtpipe <= AutoCast matched (encoder-24)"
    rows = [r for r in results if _ok(r["autocast_matched"])]
    if not rows:
        return label, "AutoCast not run", "n/a"
    parts = [f"{r['model']} {r['trtpipe']['casts']}/{r['autocast_matched']['casts']}" for r in rows]
    target = next((r for r in rows if r["model"] == "encoder-24"), None)
    if target is None:
        return label, ", ".join(parts), "n/a"
    passed = target["trtpipe"]["casts"] <= target["autocast_matched"]["casts"]
    return label, ", ".join(parts), "PASS" if passed else "FAIL"


def _target_casts_defaults(results):
    """Issue 16's "done when": trtpipe writes no more Casts than AutoCast's defaults, allowing one per
    float graph input and output that trtpipe keeps in its type and AutoCast's defaults make FP16."""
    label = "Casts trtpipe <= AutoCast defaults + kept float I/O"
    rows = [r for r in done_when_rows(results) if r["verdict"] != "n/a"]
    if not rows:
        return label, "AutoCast not run", "n/a"
    parts = [f"{r['model']} {r['written']}/{r['autocast']}+{len(r['allowance'])}" for r in rows]
    return label, ", ".join(parts), "PASS" if all(r["casts_ok"] for r in rows) else "FAIL"


def _target_accuracy(results):
    label = "accuracy trtpipe not worse (paired, every output)"
    verdicts = [(r["model"], name, v) for r in results for run, _ in RUNS
                for name, v in (verdicts_against(r, run) or {}).items()]
    if not verdicts:
        return label, "AutoCast not run", "n/a"
    counts = {kind: sum(v.verdict == kind for _, _, v in verdicts) for kind in (BETTER, SAME, WORSE)}
    worse = sorted({f"{model}:{name}" for model, name, v in verdicts if v.verdict == WORSE})
    text = (f"{len(verdicts)} comparisons: {counts[BETTER]} better, {counts[SAME]} same within noise, "
            f"{counts[WORSE]} worse" + (f" ({', '.join(worse)})" if worse else ""))
    return label, text, "FAIL" if worse else "PASS"
