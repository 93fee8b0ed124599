"""bench/quantized/results.json: one flat key per figure (bench/common/results.py).

Keys: `<source>.<quantizer>.source_quantized` / `.source_linear` (the source's engine), and per
converter (`default`, the fitting recipe's name, `autocast`): `.casts`, `.casts_qdq`, `.fp16_share` (%),
`.quantized` (linear ops quantized in its engine), `.lost`, `.seconds`; trtpipe's also `.fell_back`,
`.passed` (1/0, the verdict: the anchored criterion), `.passed_vs_qdq` (1/0, within the recipe's bounds
against the QDQ model), `.rel_l2`, `.rel_l2_bound` (against the QDQ model), `.anchored_rel_l2`,
`.anchored_rel_l2_bound` (against the anchor, the widened bound), `.codes_differ` (%), `.float_rel_l2_qdq`,
`.float_rel_l2_candidate`, `.run_seconds`; `derived` (the default config without the float model, its
verdict anchored on the QDQ model without its activation Q/DQ): `.passed`, `.passed_vs_qdq`, `.anchored_rel_l2`,
`.anchored_rel_l2_bound`; `models`, `passing`, `summary` (the last line), `seconds`.
A figure a converter did not produce (it failed, or no engine was built) is left out.
"""
from __future__ import annotations

from pathlib import Path

from bench.common.results import write_results

COMMAND = "python -m bench.quantized --record"


def figures(rows) -> dict:
    found = {}
    for row in rows:
        key = f"{row.source.name}.{row.quantizer}"
        if row.error:
            continue
        found[f"{key}.source_quantized"] = row.source_quantized
        found[f"{key}.source_linear"] = row.source_linear
        for c in row.converted:
            if not c.ok:
                continue
            tool = "autocast" if c.tool == "AutoCast" else c.tool.split(" ", 1)[1]
            at = f"{key}.{tool}"
            found.update({f"{at}.casts": c.casts, f"{at}.casts_qdq": c.casts_qdq,
                          f"{at}.fp16_share": round(100 * c.fp16_share, 2), f"{at}.seconds": round(c.seconds, 3)})
            if "error" not in c.engine and c.engine:
                found[f"{at}.quantized"] = len(c.engine["output_quantized"])
                found[f"{at}.lost"] = len(c.engine["lost"])
                if tool != "autocast":
                    found[f"{at}.fell_back"] = len(c.engine["fell_back"])
            if tool == "autocast":
                continue
            found[f"{at}.run_seconds"] = round(c.run_seconds, 2)
            found.update(_verdict(at, c, ("rel_l2", "rel_l2_bound", "anchored_rel_l2", "anchored_rel_l2_bound",
                                          "float_rel_l2_qdq", "float_rel_l2_candidate")))
            if c.codes_differ is not None:
                found[f"{at}.codes_differ"] = round(100 * c.codes_differ, 3)
        if row.derived is not None and row.derived.ok:
            found.update(_verdict(f"{key}.derived", row.derived, ("anchored_rel_l2", "anchored_rel_l2_bound")))
    good = sum(r.counts for r in rows)
    derived = [r.derived for r in rows if r.derived is not None and r.derived.ok]
    found["derived_passing"] = sum(bool(d.passed) for d in derived)
    found.update({"models": len(rows), "passing": good,
                  "summary": f"quantized: {good}/{len(rows)} models keep every quantized layer and pass"})
    return found


def _verdict(at: str, converted, numbers: tuple) -> dict:
    """A trtpipe config's verdict (1/0) and the named numbers, those it has."""
    found = {f"{at}.{name}": int(getattr(converted, name)) for name in ("passed", "passed_vs_qdq")
             if getattr(converted, name) is not None}
    found.update({f"{at}.{name}": round(getattr(converted, name), 6) for name in numbers
                  if getattr(converted, name) is not None})
    return found


def write(rows, seconds: float, bench_python: str) -> Path:
    from importlib.metadata import PackageNotFoundError, version

    try:
        modelopt = version("nvidia-modelopt")
    except PackageNotFoundError:
        modelopt = "in the bench Python"
    notes = (f"ModelOpt ({modelopt}, run by {bench_python}) and ONNX Runtime quantize_static; engines built ahead "
             "of time for sm89 by the real TensorRT-RTX 1.7.1 builder (bench/rtx oracle); failures: "
             + ("; ".join(f"{r.label}: {_why(r)}" for r in rows if not r.counts) or "none"))
    return write_results("quantized", {**figures(rows), "seconds": round(seconds, 1)}, command=COMMAND, notes=notes)


def _why(row) -> str:
    if row.error:
        return row.error[:200]
    reasons = []
    for c in row.trtpipe:
        if not c.ok:
            reasons.append(f"{c.tool} failed: {c.error[:120]}")
            continue
        if "error" in c.engine or not c.engine:
            reasons.append(f"{c.tool}: engine not built")
        elif c.engine["lost"] or c.engine["fell_back"]:
            reasons.append(f"{c.tool}: lost {len(c.engine['lost'])}, FP16 run FP32 {len(c.engine['fell_back'])}")
        if c.passed is False:
            reasons.append(f"{c.tool}: verdict FAIL (exit {c.exit_code}, rel_l2 {c.rel_l2} vs the QDQ model, "
                           f"{c.anchored_rel_l2} vs the anchor, bound {c.anchored_rel_l2_bound})")
        elif c.passed is None:
            reasons.append(f"{c.tool}: no verdict (exit {c.exit_code})")
    return ", ".join(reasons)
