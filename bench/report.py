"""Print the benchmark's tables and judge its targets.

Targets (the issue "Speed" of the precision stage), each printed as measured/target:
1. the 48-layer encoder converts in under 3 s in trtpipe (median of the whole stage);
2. trtpipe at least 5x faster than AutoCast on the 24-layer encoder (ratio of medians);
3. no more Cast nodes than AutoCast for the same exclusions, on every model;
4. equal or better accuracy than AutoCast on every output of every model.

Decision: "equal" accuracy means within 0.1 % relative (`SAME_WITHIN`) on max_rel and
on 1 - cosine; both tools are evaluated by the same deterministic emulator, so
smaller differences are rounding noise of the metrics, not of the models. A
non-finite output is worse than any finite one.
"""

from __future__ import annotations

import math

SECONDS_48_LAYERS = 3.0
MIN_SPEEDUP_24_LAYERS = 5.0
SAME_WITHIN = 1e-3


def print_report(results: list[dict], environment: dict) -> bool:
    """Print everything; True when every target that could be measured passes."""
    print(f"\nAutoCast: {environment['autocast']}; onnx {environment['onnx']}; "
          f"benchmark total {environment['seconds_total']} s\n")
    _print_conversion_table(results)
    _print_accuracy_table(results)
    verdicts = [_target_48_layers(results), _target_speedup(results), _target_casts(results),
                _target_accuracy(results)]
    print("\nTargets")
    for label, text, verdict in verdicts:
        print(f"  {label:<40} {text}  -> {verdict}")
    return all(verdict != "FAIL" for _, _, verdict in verdicts)


def _ok(side: dict) -> bool:
    return side.get("status") == "ok"


def _print_conversion_table(results: list[dict]) -> None:
    header = (f"{'model':<16}{'nodes':>6}{'FP32 req':>9} | {'trtpipe s (runs)':>17}{'AutoCast s (runs)':>19}"
              f"{'AC/trt':>8} | {'Casts trt/AC':>13} | {'FP32 nodes trt/AC':>18} | {'excl ok trt/AC':>16}")
    print(header)
    print("-" * len(header))
    for r in results:
        t, a = r["trtpipe"], r["autocast"]
        trt_time = f"{t['median']:.3f} ({len(t['seconds'])})"
        if _ok(a):
            ac_time, ratio = f"{a['median']:.3f} ({len(a['seconds'])})", f"{a['median'] / t['median']:.1f}x"
            casts, fp32 = f"{t['casts']}/{a['casts']}", f"{t['fp32_nodes']}/{a['fp32_nodes']}"
            excl = f"{t['exclusions_honoured']}/{a['exclusions_honoured']} of {r['fp32_requested']}"
        else:
            ac_time, ratio = "-", "-"
            casts, fp32 = f"{t['casts']}/-", f"{t['fp32_nodes']}/-"
            excl = f"{t['exclusions_honoured']}/- of {r['fp32_requested']}"
        print(f"{r['model']:<16}{r['nodes']:>6}{r['fp32_requested']:>9} | {trt_time:>17}{ac_time:>19}{ratio:>8} | "
              f"{casts:>13} | {fp32:>18} | {excl:>16}")
        if not _ok(a) and not a["status"].startswith("unavailable"):  # unavailable: said once, above
            print(f"{'':<16}AutoCast: {a['status']}")
        for tool, side in (("trtpipe", t), ("AutoCast", a)):
            if _ok(side) and side["exclusions_missing"]:
                print(f"{'':<16}{tool}: {len(side['exclusions_missing'])} of the excluded nodes are not in its output "
                      f"(e.g. {side['exclusions_missing'][0]}): it rewrote them")


def _print_accuracy_table(results: list[dict]) -> None:
    header = (f"\n{'model':<16}{'output':<20} | {'max_rel trt / AC':>22} | {'cosine trt / AC':>26} | "
              f"{'nonfinite':>10} | trtpipe vs AC")
    print(header)
    print("-" * (len(header) - 1))
    for r in results:
        t, a = r["trtpipe"], r["autocast"]
        for name, tm in t["accuracy"].items():
            am = a["accuracy"][name] if _ok(a) else None
            rel = f"{_g(tm['max_rel'])} / {_g(am['max_rel']) if am else '-'}"
            cos = f"{_cos(tm['cosine'])} / {_cos(am['cosine']) if am else '-'}"
            nonfinite = f"{tm['nonfinite']}/{am['nonfinite'] if am else '-'}"
            verdict = ("not worse" if _not_worse(tm, am) else "WORSE") if am else "-"
            print(f"{r['model']:<16}{name:<20} | {rel:>22} | {cos:>26} | {nonfinite:>10} | {verdict}")


def _target_48_layers(results):
    row = next((r for r in results if r["model"] == "encoder-48"), None)
    if row is None:
        return "encoder-48 trtpipe < 3 s", "not measured (--layers without 48)", "n/a"
    seconds = row["trtpipe"]["median"]
    return ("encoder-48 trtpipe < 3 s", f"{seconds:.2f} s / {SECONDS_48_LAYERS:.0f} s = {seconds / SECONDS_48_LAYERS:.2f}",
            "PASS" if seconds < SECONDS_48_LAYERS else "FAIL")


def _target_speedup(results):
    label = "encoder-24 AutoCast/trtpipe >= 5x"
    row = next((r for r in results if r["model"] == "encoder-24"), None)
    if row is None or not _ok(row["autocast"]):
        return label, "AutoCast " + (row["autocast"]["status"] if row else "not measured"), "n/a"
    speedup = row["autocast"]["median"] / row["trtpipe"]["median"]
    return (label, f"{speedup:.1f}x / {MIN_SPEEDUP_24_LAYERS:.0f}x = {speedup / MIN_SPEEDUP_24_LAYERS:.2f}",
            "PASS" if speedup >= MIN_SPEEDUP_24_LAYERS else "FAIL")


def _target_casts(results):
    """The issue's criterion: on the 24-layer encoder, no more Casts than AutoCast for the
    same exclusions. Every other model's ratio is printed too. `mixed_precision` is
    informational: its recipe keeps the author's Cast chains as written (a requirement),
    while AutoCast removes the author's FP16->FP32->FP16 round trip and a dead Cast."""
    label = "Casts trtpipe <= AutoCast (encoder-24)"
    rows = [r for r in results if _ok(r["autocast"])]
    if not rows:
        return label, "AutoCast not run", "n/a"
    parts = [f"{r['model']} {r['trtpipe']['casts']}/{r['autocast']['casts']}"
             f"={r['trtpipe']['casts'] / max(r['autocast']['casts'], 1):.2f}" for r in rows]
    target = next((r for r in rows if r["model"] == "encoder-24"), None)
    if target is None:
        return label, ", ".join(parts), "n/a"
    passed = target["trtpipe"]["casts"] <= target["autocast"]["casts"]
    return label, ", ".join(parts), "PASS" if passed else "FAIL"


def _target_accuracy(results):
    label = "accuracy trtpipe not worse (every output)"
    rows = [r for r in results if _ok(r["autocast"])]
    if not rows:
        return label, "AutoCast not run", "n/a"
    worse = [f"{r['model']}:{name}" for r in rows for name, tm in r["trtpipe"]["accuracy"].items()
             if not _not_worse(tm, r["autocast"]["accuracy"][name])]
    outputs = sum(len(r["trtpipe"]["accuracy"]) for r in rows)
    text = f"{outputs - len(worse)}/{outputs} outputs not worse" + (f" (worse: {', '.join(worse)})" if worse else "")
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
