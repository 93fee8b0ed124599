"""One table at the end of a sweep: `summary.md` and `summary.csv` in the sweep root.

A Hydra callback (`on_multirun_end` runs in the launching process, for the basic,
joblib and submitit launchers alike) reads each job's `manifest.json`,
`precision_plan.json` and `validation.json`: it needs no state from the jobs, so it
works when they ran in other processes or on other hosts.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

from hydra.experimental.callback import Callback

log = logging.getLogger("trtpipe")

COLUMNS = ["job", "overrides", "status", "validation", "worst", "fp16_flop_share", "fp32_nodes", "casts",
           "engine_latency_ms", "seconds", "run_dir"]


class SweepSummary(Callback):
    # The worst exit code of the last sweep, for the command line (0, 1 or 2).
    last_exit_code = 0
    # `--quiet` (set by the command line): the table is written to summary.md/.csv, not printed.
    quiet = False

    def on_multirun_end(self, config, **kwargs) -> None:
        root = Path(config.hydra.sweep.dir)
        rows = [job_row(path) for path in sorted(root.glob("*/manifest.json"), key=_job_number)]
        write_summary(root, rows)
        SweepSummary.last_exit_code = max((row["_exit"] for row in rows), default=0)
        if not SweepSummary.quiet:
            log.info("sweep summary (%d jobs): %s\n%s", len(rows), root / "summary.md", markdown(rows))


def job_row(manifest_path: Path) -> dict:
    run_dir = manifest_path.parent
    manifest = json.loads(manifest_path.read_text())
    stages = {s["name"]: s for s in manifest["stages"]}
    row = {"job": run_dir.name, "overrides": " ".join(manifest.get("overrides", [])),
           "status": manifest.get("status"), "validation": "-", "worst": "-", "fp16_flop_share": "-",
           "fp32_nodes": "-", "casts": "-", "engine_latency_ms": "-",
           "seconds": round(sum(s.get("seconds") or 0 for s in manifest["stages"]), 2), "run_dir": str(run_dir)}
    plan = _artifact(run_dir, stages.get("precision"), "plan")
    if plan:
        totals = plan["totals"]
        row.update(fp16_flop_share=f"{totals['low_precision_flop_share'] * 100:.1f}%",
                   fp32_nodes=totals["nodes"].get("fp32", 0), casts=totals["casts_added"])
    report = _artifact(run_dir, stages.get("validate"), "report")
    if report:
        row["validation"] = "passed" if report["passed"] else "FAILED"
        row["worst"] = _worst(report)
    row["_exit"] = manifest.get("exit_code", 0 if manifest.get("status") == "ok" else 1)
    return row


def write_summary(root: Path, rows: list[dict]) -> None:
    (root / "summary.md").write_text(markdown(rows) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    (root / "summary.csv").write_text(buffer.getvalue())


def markdown(rows: list[dict]) -> str:
    shown = [c for c in COLUMNS if c != "run_dir"]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in shown) + " |" for row in rows]
    return "\n".join(lines)


def _worst(report: dict) -> str:
    """The lowest cosine and the highest rel_l2 (the whole-output, scale-free error) over every
    candidate output."""
    metrics = [m for c in report["candidates"] for m in c["outputs"].values() if m]
    cosines = [m["cosine"] for m in metrics if isinstance(m.get("cosine"), (int, float))]
    rels = [m["rel_l2"] for m in metrics if isinstance(m.get("rel_l2"), (int, float))]
    nonfinite = sum(m.get("nonfinite", 0) for m in metrics)
    text = f"cos {min(cosines):.6f}" if cosines else "cos n/a"
    text += f", rel_l2 {max(rels):.3g}" if rels else ""
    return text + (f", {nonfinite} non-finite" if nonfinite else "")


def _artifact(run_dir: Path, stage: dict | None, kind: str) -> dict | None:
    if not stage or kind not in (stage.get("outputs") or {}):
        return None
    try:
        return json.loads((run_dir / stage["outputs"][kind]["path"]).read_text())
    except (OSError, ValueError):
        return None


def _job_number(path: Path):
    name = path.parent.name
    return (0, int(name)) if name.isdigit() else (1, name)
