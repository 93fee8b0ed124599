"""The console view of `validation.json`: one row per candidate output, then the
localisation: the first node with non-finite values and the first node above the
error threshold, each when there is one."""

from __future__ import annotations

from trtpipe.validate.localize import LARGEST_VALUE

# (metric, heading, width, format). Decision: abs_p99 stays in validation.json only (it has
# the output's units, like max_abs, and says less); psnr is shown only when an output has one.
COLUMNS = (
    ("max_abs", "max_abs", 9, ".3g"),
    ("max_rel", "max_rel", 9, ".3g"),
    ("rel_p99", "rel_p99", 9, ".3g"),
    ("rel_l2", "rel_l2", 9, ".3g"),
    ("cosine", "cosine", 10, ".6f"),
    ("psnr", "psnr", 7, ".1f"),
    ("nonfinite", "nonfin", 6, "d"),
    ("ref_nonfinite", "ref_nf", 6, "d"),
)
# Shown only when some output has one (psnr: an image output; ref_nf: a non-finite reference).
OPTIONAL = ("psnr", "ref_nonfinite")


def report_table(report: dict) -> str:
    outputs = [metrics for c in report["candidates"] for metrics in c["outputs"].values() if metrics]
    columns = [c for c in COLUMNS if c[0] not in OPTIONAL or any(m.get(c[0]) for m in outputs)]
    lines = [f"    {'candidate':10} {'output':28} " + " ".join(f"{h:>{w}}" for _, h, w, _ in columns) + "  verdict"]
    for candidate in report["candidates"]:
        reasons = candidate.get("reasons", [])
        for output, metrics in candidate["outputs"].items():
            failed = [r for r in reasons if r.startswith(f"{output}:")]
            verdict = "ok" if not failed else "FAIL: " + failed[0].split(": ", 1)[1]
            cells = [_fmt((metrics or {}).get(key), spec) for key, _, _, spec in columns]
            lines.append(f"    {candidate['name']:10} {_tail(output):28} "
                         + " ".join(f"{cell:>{w}}" for cell, (_, _, w, _) in zip(cells, columns)) + f"  {verdict}")
    for note in report.get("notes", []):
        lines.append(f"    note: {note}")
    for line in localization_lines(report.get("localization")):
        lines.append(f"    {line}")
    return "\n".join(lines) + "\n"


def failure_message(report: dict) -> str:
    failed = [c for c in report["candidates"] if not c["passed"]]
    parts = [f"{c['name']}: {c['reasons'][0]}" for c in failed if c.get("reasons")]
    message = "validation failed: " + "; ".join(parts or ["a candidate failed"])
    for line in localization_lines(report.get("localization")):
        message += f"; {line}"
    return message


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
        lines.append(f"{title}: {_describe(found)}")
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


def _tail(name: str, width: int = 28) -> str:
    # The end of an exporter name says most (".../attention/self/Softmax_output_0").
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # "inf", "nan" as written in JSON
        return value
    return format(value, spec)
