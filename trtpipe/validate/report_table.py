"""The console view of `validation.json`: one row per candidate output, then the
localisation: the first node with non-finite values and the first node above the
error threshold, each when there is one; under an FP32 one, the upstream low-precision
nodes whose rounding it amplifies, ranked (upstream_origins.py).

Decision: a failed validation is told once. The table (stdout) has the numbers, the
failing bound per output and the localisation; the stage's failure line (stderr,
`failure_message`) is a one-line summary naming the failing candidates, their
failing outputs and the culprit nodes, without repeating the numbers, so that
`--quiet` and scripts reading stderr still learn what failed and where.

Decision: names are the model's, and may hold newlines and terminal escape sequences:
every line is made of escaped names (safe_text.py), and an output name is escaped before
it is shortened to its column, so a cut never splits an escape the terminal acts on.
"""

from __future__ import annotations

from trtpipe.safe_text import safe_text
from trtpipe.validate.localize import LARGEST_VALUE
from trtpipe.validate.upstream_origins import describe as describe_amplifier
from trtpipe.validate.short_names import unique_short_names

# (metric, heading, width, format). Decision: abs_p99 is shown only when a bound is set on it
# (it has the output's units, like max_abs, and says less); psnr and px>1lv (pixels_off_8bit, the
# share of image elements more than one 8-bit level off) are shown only when an output is an
# image. argmax_agree is shown only when a bound is set on it: it is reported for every output
# with a class axis, hidden states included, where it means nothing unless the user bounds it.
# Decision (issue 33 item 7): every bound checked has its column. A bound the user set on a
# metric hidden by default (`argmax_agree_min`) was judged and stored, but the table did not
# show the number it judged; the report's `bounds` (validate stage) say which are set.
COLUMNS = (
    ("max_abs", "max_abs", 9, ".3g"),
    ("abs_p99", "abs_p99", 9, ".3g"),
    ("max_rel", "max_rel", 9, ".3g"),
    ("rel_p99", "rel_p99", 9, ".3g"),
    ("rel_l2", "rel_l2", 9, ".3g"),
    ("cosine", "cosine", 10, ".6f"),
    ("psnr", "psnr", 7, ".1f"),
    ("pixels_off_8bit", "px>1lv", 8, ".3%"),
    ("argmax_agree", "argmax", 8, ".2%"),
    ("nonfinite", "nonfin", 6, "d"),
    ("ref_nonfinite", "ref_nf", 6, "d"),
)
# Shown only when some output has one (psnr: an image output; ref_nf: a non-finite reference).
OPTIONAL = ("psnr", "pixels_off_8bit", "ref_nonfinite")
SHOWN_WHEN_ZERO = ("pixels_off_8bit",)  # 0% of pixels moved is worth reading; 0 ref_nf is not
BOUNDED_ONLY = ("abs_p99", "argmax_agree")  # shown only when some output's bound judges them
OUTPUT_WIDTH = 28


def report_table(report: dict) -> str:
    outputs = [metrics for c in report["candidates"] for metrics in c["outputs"].values() if metrics]
    bounded = bounded_metrics(report)
    columns = [c for c in COLUMNS if _shown(c[0], outputs, bounded)]
    shown = unique_short_names((safe_text(o) for c in report["candidates"] for o in c["outputs"]), OUTPUT_WIDTH)
    lines = [f"    {'candidate':10} {'output':{OUTPUT_WIDTH}} "
             + " ".join(f"{h:>{w}}" for _, h, w, _ in columns) + "  verdict"]
    for candidate in report["candidates"]:
        reasons = candidate.get("reasons", [])
        by_anchor = (candidate.get("anchored") or {}).get("failed_against_reference", [])
        for output, metrics in candidate["outputs"].items():
            failed = [r for r in reasons if r.startswith(f"{output}:")]
            verdict = "ok" if not failed else "FAIL: " + failed[0].split(": ", 1)[1]
            if not failed and output in by_anchor:
                verdict = "ok by the anchored criterion (out of the bounds against the QDQ model)"
            lines.append(_row(candidate["name"], output, metrics, columns, shown, verdict))
    if report.get("degenerate_data"):  # the verdict stands, but says little (degenerate_data.py)
        lines.append(f"    verdict on degenerate data: {safe_text(report['degenerate_data'])}; give data.path "
                     "(real samples) or data.inputs ranges and shapes that vary")
    for note in report.get("notes", []):
        lines.append(f"    note: {safe_text(note)}")
    lines += quantized_lines(report.get("quantized"), columns, shown, report["candidates"])
    for line in localization_lines(report.get("localization")):
        lines.append(f"    {line}")
    return "\n".join(lines) + "\n"


def _row(name: str, output: str, metrics: dict | None, columns, shown: dict, last: str) -> str:
    cells = [_fmt((metrics or {}).get(key), spec) for key, _, _, spec in columns]
    short = shown.get(safe_text(output), safe_text(output)[:OUTPUT_WIDTH])
    return (f"    {safe_text(name):10} {short:{OUTPUT_WIDTH}} "
            + " ".join(f"{cell:>{w}}" for cell, (_, _, w, _) in zip(cells, columns)) + f"  {safe_text(last)}")


def quantized_lines(quantized: dict | None, columns, shown: dict, candidates: list[dict] = ()) -> list[str]:
    """For a quantized model (validate stage's `quantized`): what the reference is, the share of codes
    the emulation computes differently, the criterion that judged (the anchor, the widened bounds and
    each candidate against the anchor) and the rows against the float model (their last column says
    what each measures)."""
    if not quantized:
        return []
    lines = [f"    note: {safe_text(quantized['reference'])}"]
    codes = quantized.get("codes")
    if codes:
        step = f", by at most {codes['max_step']} step(s)" if codes.get("max_step") is not None else ""
        lines.append(f"    codes: {codes['differ']} of {codes['compared']} {'/'.join(codes['types'])} codes "
                     f"({_fmt(codes['share'], '.2%')}) in {codes['tensors']} quantized tensor(s) differ between the "
                     f"reference and the emulated candidate{step}")
    lines += criterion_lines(quantized.get("criterion"), candidates, columns, shown)
    float_model = quantized.get("float_model")
    if float_model:
        lines.append(f"    against the float model {safe_text(float_model['path'])}:")
        for comparison in float_model["comparisons"]:
            measures = comparison["measures"].split(" (", 1)[0]
            for output, metrics in comparison["outputs"].items():
                lines.append(_row(comparison["name"], output, metrics, columns, shown, measures))
    return lines


def criterion_lines(criterion: dict | None, candidates, columns, shown: dict) -> list[str]:
    """The anchored criterion (validate/anchored.py): the anchor, the bounds per output, and each
    candidate against the anchor with its verdict there."""
    if not criterion or criterion.get("kind") != "anchored":
        return []
    anchor = criterion["anchor"]
    lines = [f"    criterion: anchored on {safe_text(anchor['description'])} ({safe_text(anchor['source'])}); "
             "bounds against it: QDQ model's own distance widened by the recipe's"]
    for output, bounds in criterion["bounds"].items():
        text = ", ".join(f"{name} {value:.6g}" for name, value in (bounds or {}).items()) if bounds is not None \
            else "none (the QDQ model is not finite against the anchor: judged against the QDQ model alone)"
        lines.append(f"      {shown.get(safe_text(output), safe_text(output)[:OUTPUT_WIDTH])}: {text}")
    for candidate in candidates:
        anchored = candidate.get("anchored")
        if not anchored:
            continue
        for output, metrics in anchored["outputs"].items():
            failed = [r for r in anchored.get("reasons", []) if r.startswith(f"{output}:")]
            verdict = "ok" if not failed else "FAIL: " + failed[0].split(": ", 1)[1]
            lines.append(_row(f"{candidate['name']}", output, metrics, columns, shown, f"vs the anchor: {verdict}"))
    return lines


def bounded_metrics(report: dict) -> set[str]:
    """The metrics a bound is set on for some output (`bounds`: output -> {bound name: value})."""
    from trtpipe.validate.compare import BOUNDS

    metric_of = {bound: metric for metric, bound, _ in BOUNDS}
    return {metric_of[name] for bounds in (report.get("bounds") or {}).values() for name, value in bounds.items()
            if value is not None and name in metric_of}


def _shown(metric: str, outputs: list[dict], bounded: set[str]) -> bool:
    if metric in BOUNDED_ONLY:  # judged only when bounded, and then only where it applies
        return metric in bounded and any(m.get(metric) is not None for m in outputs)
    if metric not in OPTIONAL:
        return True
    return any(m.get(metric) or (metric in SHOWN_WHEN_ZERO and m.get(metric) is not None) for m in outputs)


def failure_message(report: dict) -> str:
    """One line: which candidates failed on which outputs, and the culprit nodes (no numbers:
    those are in the table)."""
    parts = []
    for candidate in (c for c in report["candidates"] if not c["passed"]):
        outputs = list(dict.fromkeys(r.split(": ", 1)[0] for r in candidate.get("reasons", [])))
        parts.append(f"{candidate['name']} out of tolerance on {', '.join(outputs)}" if outputs
                     else f"{candidate['name']} failed")
    message = "validation failed: " + "; ".join(parts or ["a candidate failed"])
    localization = report.get("localization") or {}
    culprits = [(title, localization.get(key)) for title, key in
                (("first non-finite node", "first_nonfinite"), ("first node above the threshold", "first_above_threshold"))]
    if not any(found for _, found in culprits) and localization.get("first"):
        culprits = [("first bad node", localization["first"])]
    for title, found in culprits:
        if found:
            message += f"; {title}: {found['node']} ({found['op_type']}, {found.get('precision', '?')})"
            origin = ((found.get("amplifies") or {}).get("upstream") or [None])[0]
            if origin:
                message += f" amplifying {origin['node']} ({origin['op_type']}, {origin['precision']})"
    return safe_text(message)


def localization_lines(localization: dict | None) -> list[str]:
    """One line per kind of finding: the first non-finite node, then the first node above the
    threshold (both when both exist; older reports have only `first`)."""
    if not localization:
        return []
    findings = [localization.get("first_nonfinite"), localization.get("first_above_threshold")]
    if not any(findings):
        findings = [localization.get("first")]
    lines = []
    for found in filter(None, findings):
        if found.get("kind", "nonfinite" if found.get("cand_nonfinite") else "above_threshold") == "nonfinite":
            title = "first node with non-finite values"
        else:
            title = f"first node above the error threshold ({_fmt(localization.get('threshold'), '.2%')})"
        lines.append(safe_text(f"{title}: {_describe(found)}"))
        if found.get("amplifies"):
            lines.append(safe_text(f"  {describe_amplifier(found['amplifies'])}"))
    return lines


def _describe(first: dict) -> str:
    text = (f"{first['node']} ({first['op_type']}, {first.get('precision', '?')}): reference max |x| "
            f"{_fmt(first['ref_max_abs'])}, candidate error {_fmt(first['cand_max_abs_error'])}")
    if first.get("cand_nonfinite"):
        text += f", {first['cand_nonfinite']} non-finite"
        largest = LARGEST_VALUE.get(first.get("precision"))
        if largest is not None and isinstance(first["ref_max_abs"], float) and first["ref_max_abs"] > largest:
            text += f" (overflow: above the {first['precision']} maximum {largest:g})"
    return text


def _fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # "inf", "nan" as written in JSON
        return value
    return format(value, spec)
