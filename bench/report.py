"""Print the benchmark's tables and judge its targets, every one a ratio measured in the same run.

Targets (issue 16; machines are shared and noisy, so no absolute seconds):
1. whole path / (onnx.load + onnx.save of the raw export) <= 3 on every encoder;
2. linear growth: the whole path's seconds per node on the deepest encoder over
   those on the shallowest encoder of at least 12 layers <= 1.5;
3. AutoCast (matched exclusions) / trtpipe whole path >= 5x on the 24-layer encoder;
4. Casts: trtpipe <= AutoCast with matched exclusions (24-layer encoder), and
   trtpipe <= AutoCast's defaults + one Cast per float graph input and output
   (trtpipe keeps their type, AutoCast's defaults make them FP16), every model;
5. accuracy: trtpipe not worse than either AutoCast run, every output.

Decision: "equal" accuracy means within 0.1 % relative (`SAME_WITHIN`) on max_rel and
on 1 - cosine; every output is evaluated by the same deterministic emulator, so
smaller differences are rounding noise of the metrics, not of the models. A
non-finite output is worse than any finite one.
"""

from __future__ import annotations

import math

MAX_LOAD_SAVE_RATIO = 3.0
MAX_GROWTH = 1.5
MIN_SPEEDUP_24_LAYERS = 5.0
SAME_WITHIN = 1e-3
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
    return all(verdict != "FAIL" for _, _, verdict in verdicts)


def _ok(side: dict) -> bool:
    return side.get("status") == "ok"


def _time(side: dict) -> str:
    return f"{side['median']:.3f} ({len(side['seconds'])})" if _ok(side) else "-"


def _ratio(a: dict, b: dict) -> str:
    return f"{a['median'] / b['median']:.2f}" if _ok(a) and _ok(b) else "-"


def _print_time_table(results: list[dict]) -> None:
    print("\nWhole path from the raw export, median seconds (runs)")
    header = (f"{'model':<16}{'nodes':>6} | {'load+save':>10}{'trtpipe':>14}{'trt/io':>8} | "
              f"{'AC matched':>14}{'AC defaults':>14} | {'trt/ACm':>8}{'trt/ACd':>8}")
    print(header)
    print("-" * len(header))
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
    print(f"\nPlans: trtpipe (its recipe) / AutoCast {label}")
    header = (f"{'model':<16} | {'Casts':>11} | {'FP32 nodes':>11} | {'FP16 FLOPs':>13} | "
              f"{'excl ok of N':>16}")
    print(header)
    print("-" * len(header))
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
    print("\nAccuracy on held-out inputs (worst of the evaluation inputs): trtpipe / AC matched / AC defaults")
    header = f"{'model':<16}{'output':<20} | {'max_rel':>26} | {'cosine':>38} | {'nonfinite':>9} | vs m / vs d"
    print(header)
    print("-" * len(header))
    for r in results:
        t = r["trtpipe"]
        if not _ok(t):
            continue
        for name, tm in t["accuracy"].items():
            others = [r[run]["accuracy"][name] if _ok(r[run]) else None for run, _ in RUNS]
            rel = " / ".join([_g(tm["max_rel"]), *(_g(o["max_rel"]) if o else "-" for o in others)])
            cos = " / ".join([_cos(tm["cosine"]), *(_cos(o["cosine"]) if o else "-" for o in others)])
            bad = "/".join([str(tm["nonfinite"]), *(str(o["nonfinite"]) if o else "-" for o in others)])
            verdict = " / ".join(("ok" if _not_worse(tm, o) else "WORSE") if o else "-" for o in others)
            print(f"{r['model']:<16}{name:<20} | {rel:>26} | {cos:>38} | {bad:>9} | {verdict}")


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
    """Issue 16's "done when": no more Casts than AutoCast's defaults, allowing one per float
    graph input and output that trtpipe keeps in its type (`float_io`)."""
    label = "Casts trtpipe <= AutoCast defaults + float I/O"
    rows = [r for r in results if _ok(r["autocast_defaults"])]
    if not rows:
        return label, "AutoCast not run", "n/a"
    over = [r for r in rows if r["trtpipe"]["casts"] > r["autocast_defaults"]["casts"] + r["float_io"]]
    parts = [f"{r['model']} {r['trtpipe']['casts']}/{r['autocast_defaults']['casts']}+{r['float_io']}" for r in rows]
    return label, ", ".join(parts), "FAIL" if over else "PASS"


def _target_accuracy(results):
    label = "accuracy trtpipe not worse (every output)"
    pairs = [(r["model"], name, tm, r[run]["accuracy"][name]) for r in results for run, _ in RUNS
             if _ok(r[run]) and _ok(r["trtpipe"]) for name, tm in r["trtpipe"]["accuracy"].items()]
    if not pairs:
        return label, "AutoCast not run", "n/a"
    worse_pairs = [f"{model}:{name}" for model, name, tm, am in pairs if not _not_worse(tm, am)]
    worse = sorted(set(worse_pairs))
    text = f"{len(pairs) - len(worse_pairs)}/{len(pairs)} comparisons not worse" + (
        f" (worse: {', '.join(worse)})" if worse else "")
    return label, text, "FAIL" if worse else "PASS"


def _not_worse(trtpipe: dict, autocast: dict | None) -> bool:
    if autocast is None:
        return True
    t_bad, a_bad = _number(trtpipe["nonfinite"]), _number(autocast["nonfinite"])
    if t_bad != a_bad:
        return t_bad < a_bad
    checks = [(_number(trtpipe["max_rel"]), _number(autocast["max_rel"])),
              (1.0 - _number(trtpipe["cosine"]), 1.0 - _number(autocast["cosine"]))]
    return all(math.isnan(t) or math.isnan(a) or t <= a * (1 + SAME_WITHIN) + 1e-12 for t, a in checks)


def _number(value) -> float:
    return float(value)  # metrics JSON writes inf/nan as strings, which float() reads back


def _g(value) -> str:
    return f"{_number(value):.3g}"


def _cos(value) -> str:
    return f"{_number(value):.9f}"
