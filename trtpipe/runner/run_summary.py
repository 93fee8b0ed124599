"""`summary.md` in a single run's directory: the run in Markdown, to paste into a review (issue 33, item 7).

A sweep writes one table for all its jobs in the sweep root (sweep_summary.py); a single run had
nothing to paste but the console. This file says, from the run's own records (`manifest.json`,
`precision_plan.json`, `validation.json`): the outcome and exit code, the overrides, each stage's
status, seconds and summary line, the plan's FP16 share, FP32 nodes and Casts, and the verdict of
every output with every bound it was checked against.

Decisions:
- Written after the manifest, from the files alone (`write_run_summary(run_dir)`), so it says
  nothing the manifest does not; a run whose plan or report is missing (a failed or interrupted
  run) gets the parts it has.
- Names are data: every cell goes through safe_text(markdown=True) (no control character, no
  `|` breaking a row).
- Not an artifact: the manifest does not list it and verify does not check it; it is rewritten
  whenever the run directory is.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtpipe.runner.sweep_jobs import one_line
from trtpipe.safe_text import safe_text

SUMMARY_NAME = "summary.md"
# The metrics shown per output, with the bound key that checks each (validation.json `bounds`).
_METRICS = (("max_abs", "max_abs"), ("rel_l2", "rel_l2"), ("cosine", "cosine_min"), ("psnr", "psnr_min"),
            ("pixels_off_8bit", "pixels_off_8bit"), ("argmax_agree", "argmax_agree_min"), ("nonfinite", None))


def write_run_summary(run_dir: Path, manifest: dict) -> Path:
    path = Path(run_dir) / SUMMARY_NAME
    path.write_text(run_markdown(Path(run_dir), manifest) + "\n")
    return path


def run_markdown(run_dir: Path, manifest: dict) -> str:
    stages = {stage["name"]: stage for stage in manifest.get("stages", [])}
    lines = [f"# trtpipe run: {_cell(manifest.get('status'))} (exit {_cell(manifest.get('exit_code'))})", ""]
    source = manifest.get("source") or {}
    model = f"built-in {source['builtin']}" if source.get("builtin") else source.get("path")
    if model:
        lines += [f"Model: `{_cell(model)}`" + (f" (sha256 {_cell(source['sha256'])[:12]}…)" if source.get("sha256") else ""),
                  ""]
    overrides = manifest.get("overrides") or []
    lines += ["Overrides: " + (" ".join(f"`{_cell(o)}`" for o in overrides) if overrides else "none (the defaults)")]
    reason = run_reason(manifest)
    if reason != "-":
        lines += ["", f"Stopped: {_cell(reason)}"]
    lines += ["", "| stage | status | seconds | summary |", "|---|---|---|---|"]
    for stage in manifest.get("stages", []):
        said = stage.get("summary") or stage.get("error") or stage.get("reason") or ""
        seconds = stage.get("seconds")
        lines.append(f"| {_cell(stage['name'])} | {_cell(stage.get('status'))} | "
                     f"{'' if seconds is None else f'{seconds:.2f}'} | {_cell(said)} |")
    plan = stage_artifact(run_dir, stages.get("precision"), "plan")
    if plan:
        totals = plan["totals"]
        lines += ["", f"Plan: {totals['low_precision_flop_share'] * 100:.2f}% of the FLOPs in low precision, "
                      f"{totals['nodes'].get('fp32', 0)} FP32 nodes, {totals['casts_added']} Casts "
                      f"(`{_cell(stages['precision']['outputs']['plan']['path'])}`)"]
    report = stage_artifact(run_dir, stages.get("validate"), "report")
    if report:
        lines += ["", *_verdict_table(report)]
    return "\n".join(lines)


def _verdict_table(report: dict) -> list[str]:
    """One row per candidate and output: each metric the report has, with its bound where one was set."""
    bounds = report.get("bounds") or {}
    lines = [f"Verdict: {'passed' if report.get('passed') else 'FAILED'}",
             "", "| candidate | output | " + " | ".join(name for name, _ in _METRICS) + " | verdict |",
             "|" + "---|" * (len(_METRICS) + 3)]
    # A quantized model judged by the anchored criterion (validate/anchored.py): the candidate against the
    # anchor, with the widened bounds, in a row of its own under the row against the reference.
    widened = (((report.get("quantized") or {}).get("criterion") or {}).get("bounds")) or {}
    for candidate in report.get("candidates", []):
        anchored = candidate.get("anchored") or {}
        for output, metrics in (candidate.get("outputs") or {}).items():
            verdict = "ok" if candidate.get("passed") else "FAIL"
            if candidate.get("passed") and output in anchored.get("failed_against_reference", []):
                verdict = "ok by the anchored criterion"
            lines += _rows(candidate.get("name"), output, metrics, bounds.get(output) or {}, verdict)
            if anchored:
                lines += _rows(f"{candidate.get('name')} vs the anchor", output, anchored["outputs"].get(output),
                               widened.get(output) or {}, "ok" if anchored.get("passed") else "FAIL")
    return lines


def _rows(name, output: str, metrics: dict | None, limits: dict, verdict: str) -> list[str]:
    if not metrics:
        return []
    cells = [_with_bound(metrics.get(metric), limits.get(bound) if bound else None, metric)
             for metric, bound in _METRICS]
    return [f"| {_cell(name)} | {_cell(output)} | " + " | ".join(cells) + f" | {verdict} |"]


def _with_bound(value, bound, name: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # a cosine to 6 decimals, as the console: 0.99999 is not 1
        shown = f"{value:.6f}" if name == "cosine" else f"{value:.4g}"
    else:
        shown = _cell(value)
    return shown if bound is None else f"{shown} (bound {bound:g})"


def _cell(value) -> str:
    return safe_text("" if value is None else str(value), markdown=True)


def run_reason(manifest: dict) -> str:
    """One line: the first failed or interrupted stage and its error; '-' for a run that passed."""
    for stage in manifest.get("stages", []):
        if stage.get("status") == "failed":
            return one_line(f"{stage['name']}: {stage.get('error') or 'failed'}")
        if stage.get("status") == "interrupted":
            return f"interrupted in stage {stage['name']}"
    return "-"


def stage_artifact(run_dir: Path, stage: dict | None, kind: str) -> dict | None:
    if not stage or kind not in (stage.get("outputs") or {}):
        return None
    try:
        return json.loads((run_dir / stage["outputs"][kind]["path"]).read_text())
    except (OSError, ValueError):
        return None
