"""The console view of `validation.json`: one row per candidate output, then the
first failing node when there is one."""

from __future__ import annotations


def report_table(report: dict) -> str:
    lines = [f"    {'candidate':10} {'output':28} {'max_abs':>10} {'max_rel':>10} {'cosine':>10} "
             f"{'psnr':>7} {'nonfin':>6}  verdict"]
    for candidate in report["candidates"]:
        reasons = candidate.get("reasons", [])
        for output, metrics in candidate["outputs"].items():
            failed = [r for r in reasons if r.startswith(f"{output}:")]
            verdict = "ok" if not failed else "FAIL: " + failed[0].split(": ", 1)[1]
            if metrics is None:
                lines.append(f"    {candidate['name']:10} {_tail(output):28} {'-':>10} {'-':>10} {'-':>10} "
                             f"{'-':>7} {'-':>6}  {verdict}")
                continue
            lines.append(
                f"    {candidate['name']:10} {_tail(output):28} {_fmt(metrics['max_abs']):>10} "
                f"{_fmt(metrics['max_rel']):>10} {_fmt(metrics['cosine'], '.6f'):>10} "
                f"{_fmt(metrics['psnr'], '.1f'):>7} {metrics['nonfinite']:>6}  {verdict}"
            )
    for note in report.get("notes", []):
        lines.append(f"    note: {note}")
    first = (report.get("localization") or {}).get("first")
    if first:
        lines.append(f"    first failing node: {_describe(first)}")
    return "\n".join(lines) + "\n"


def failure_message(report: dict) -> str:
    failed = [c for c in report["candidates"] if not c["passed"]]
    parts = [f"{c['name']}: {c['reasons'][0]}" for c in failed if c.get("reasons")]
    message = "validation failed: " + "; ".join(parts or ["a candidate failed"])
    first = (report.get("localization") or {}).get("first")
    if first:
        message += f"; first failing node {_describe(first)}"
    return message


def _describe(first: dict) -> str:
    return (f"{first['node']} ({first['op_type']}, {first.get('precision', '?')}): reference max |x| "
            f"{_fmt(first['ref_max_abs'])}, candidate error {_fmt(first['cand_max_abs_error'])}"
            + (f", {first['cand_nonfinite']} non-finite" if first.get("cand_nonfinite") else ""))


def _tail(name: str, width: int = 28) -> str:
    # The end of an exporter name says most (".../attention/self/Softmax_output_0").
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # "inf", "nan" as written in JSON
        return value
    return format(value, spec)
