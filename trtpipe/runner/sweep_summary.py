"""One table at the end of a sweep: `summary.md` and `summary.csv` in the sweep root.

A Hydra callback (`on_multirun_start`/`on_multirun_end` run in the launching process, for
the basic, joblib and submitit launchers alike) reads each job's record (runner/sweep_jobs.py),
`manifest.json`, `precision_plan.json` and `validation.json`: it needs no state from the
jobs, so it works when they ran in other processes or on other hosts.

Decisions:
- Every job has a row with its status and a one-line reason: one that ran (`ok`, `failed`,
  `interrupted`) from its manifest; one stopped by a user error (it writes no manifest)
  from its record; one whose process died (`killed`), or that never started (`not run`),
  from its record or the sweep's job list. The sweep's exit code is the worst job's.
- When the launcher itself stops (a joblib worker killed: loky raises in the launching
  process; Ctrl-C) Hydra never calls `on_multirun_end`; the command line then calls
  `finish(error)`, so the summary is written all the same.
- The launching process's Ctrl-C/SIGTERM handler marks the sweep interrupted first
  (sweep_jobs.mark_interrupted), so no job starts work after the signal.
- summary.md's rows show only the overrides that vary between jobs; those every job has
  (the recipe, model.path, stages) are written once above the table (issue 33 item 7:
  repeated in every row, the table was too wide to paste into a review). summary.csv
  keeps each job's whole list: a script reading one row gets the job's command.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import signal
from pathlib import Path

from hydra.experimental.callback import Callback

from trtpipe.runner.run_summary import run_reason, stage_artifact
from trtpipe.runner.sweep_jobs import expected_jobs, interrupted_by, mark_interrupted, one_line, read_records
from trtpipe.safe_text import safe_text

log = logging.getLogger("trtpipe")

COLUMNS = ["job", "overrides", "status", "exit_code", "reason", "validation", "worst", "fp16_flop_share",
           "fp32_nodes", "casts", "engine_latency_ms", "seconds", "run_dir"]


class SweepSummary(Callback):
    # The worst exit code of the last sweep, for the command line.
    last_exit_code = 0
    # `--quiet` (set by the command line): the table is written to summary.md/.csv, not printed.
    quiet = False
    # The sweep under way in this (launching) process and its job list (None: not known in advance).
    sweep_dir: Path | None = None
    expected: list[list[str]] | None = None
    # The signal that interrupted the last sweep (None: it was not), and its summary.md.
    last_signal: int | None = None
    last_summary: Path | None = None

    def on_multirun_start(self, config, **kwargs) -> None:
        SweepSummary.sweep_dir = Path(config.hydra.sweep.dir).absolute()
        SweepSummary.expected = expected_jobs(config)
        _mark_on_signals(SweepSummary.sweep_dir)

    def on_multirun_end(self, config, **kwargs) -> None:
        finish()


def finish(launcher_error: BaseException | None = None) -> Path | None:
    """Write the summary of the sweep under way (once); returns summary.md's path, None if no sweep was."""
    root, SweepSummary.sweep_dir = SweepSummary.sweep_dir, None
    if root is None:
        return None
    rows = sweep_rows(root, SweepSummary.expected, launcher_error)
    signum = interrupted_by(root)  # a signal the jobs missed (all had finished) still ends the sweep 128 + N
    SweepSummary.last_signal = signum
    SweepSummary.last_exit_code = max([*(row["_exit"] for row in rows), 128 + signum if signum else 0])
    try:
        write_summary(root, rows)
    except OSError as error:  # the exit code still counts every job
        log.error("trtpipe: the sweep summary could not be written in %s: %s", root, error)
        return None
    if not SweepSummary.quiet:
        log.info("sweep summary (%d jobs): %s\n%s", len(rows), root / "summary.md", markdown(rows))
    SweepSummary.last_summary = root / "summary.md"
    return SweepSummary.last_summary


def _mark_on_signals(sweep_dir: Path) -> None:
    """Ctrl-C/SIGTERM in the launching process: mark the sweep interrupted, then do what the
    handler did before (trtpipe's raises Interrupted, runner/interrupt.py)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if getattr(previous, "marks_sweep", False) or not callable(previous):
            continue

        def handler(number, frame, previous=previous):
            mark_interrupted(sweep_dir, number)
            return previous(number, frame)

        handler.marks_sweep = True
        try:
            signal.signal(signum, handler)
        except ValueError:  # not the main thread: the launcher's own handling stands
            return


def sweep_rows(root: Path, expected: list[list[str]] | None, launcher_error: BaseException | None) -> list[dict]:
    """One row per job: those of the job list, those that left a record, those that left a manifest."""
    records = read_records(root)
    signum = interrupted_by(root)
    rows = {}
    for job in sorted(set(records) | set(range(len(expected or [])))):
        record = records.get(job)
        overrides = record["overrides"] if record else expected[job]
        rows[str(job)] = _row(root, job, overrides, record, signum, launcher_error)
        rows[str(job)]["_overrides"] = list(overrides)
    covered = {Path(row["run_dir"]).resolve() for row in rows.values() if row["run_dir"] != "-"}
    for path in sorted(root.glob("*/manifest.json"), key=_job_number):  # jobs known only by their directory
        if path.parent.name not in rows and path.parent.resolve() not in covered:
            rows[path.parent.name] = job_row(path)
    return [rows[name] for name in sorted(rows, key=lambda name: _job_number(root / name / "x"))]


def _row(root: Path, job: int, overrides: list[str], record: dict | None, signum: int | None,
         launcher_error: BaseException | None) -> dict:
    run_dir = Path(record["run_dir"]) if record else root / str(job)
    status = record["status"] if record else None
    if status in ("ok", "failed", "interrupted") or (record is None and (run_dir / "manifest.json").is_file()):
        try:
            row = job_row(run_dir / "manifest.json")
            row.update(job=str(job), reason=(record or {}).get("reason") or row["reason"])
            return row
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no readable manifest: the record says what happened
    row = {"job": str(job), "overrides": " ".join(overrides), "run_dir": "-", "seconds": "-",
           **{column: "-" for column in COLUMNS if column not in ("job", "overrides", "run_dir", "seconds")}}
    if status == "running":  # the job's process ended without a word
        if signum is not None:
            row.update(status="interrupted", _exit=128 + signum,
                       reason=f"stopped with the sweep (signal {signum}) before it finished")
        else:
            code, why = launcher_stop(launcher_error)
            row.update(status="killed", _exit=code, reason=f"its process ended before the job finished: {why}")
    elif status is not None:
        row.update(status=status, _exit=record.get("exit_code") or 0, reason=record.get("reason") or "-")
    elif signum is not None:
        row.update(status="not run", _exit=0, reason=f"not started: the sweep was interrupted (signal {signum})")
    else:
        why = launcher_stop(launcher_error)[1] if launcher_error else "it left no record"
        row.update(status="not run", _exit=0, reason=f"not started: {why}")
    if record and (run_dir / "manifest.json").is_file() and status not in ("user_error", "not run"):
        row["run_dir"] = str(run_dir)
    row["exit_code"] = row["_exit"]
    return row


def launcher_stop(launcher_error: BaseException | None) -> tuple[int, str]:
    """The exit code and reason of a job whose process died, from what the launcher raised
    (loky: "... The exit codes of the workers are {SIGKILL(-9)}"): 128 + the signal, as a shell
    reports a process killed by one (137: kill -9 or the OOM killer). joblib then stops the
    sweep's other workers too (the same signal), so the reason names the worker, not the job."""
    import re

    text = str(launcher_error or "")
    found = re.search(r"\b(SIG[A-Z]+)\((-?\d+)\)", text)
    if found:
        name, number = found.group(1), abs(int(found.group(2)))
        hint = " (kill -9 or the out-of-memory killer)" if name == "SIGKILL" else ""
        return 128 + number, (f"a worker of the sweep was killed by {name}{hint}, and the launcher "
                              "stopped the jobs still running")
    if type(launcher_error).__name__ == "WorkerCrashedError":  # Ray's, with max_retries=0 (sweep_launch.py)
        # Ray does not say which signal ended its worker; its own message names the OOM killer and
        # kill -9 first. 137 as for joblib's SIGKILL: the job's process was killed, not the job's fault.
        return 128 + signal.SIGKILL, ("a Ray worker of the sweep died while it ran a job (Ray does not say by "
                                      "which signal: kill -9, the out-of-memory killer or a crash), and the "
                                      "sweep stopped")
    if launcher_error is None:
        return 1, "no result reached the launcher"
    first = one_line(text.splitlines()[0] if text else "")
    return 1, f"{type(launcher_error).__name__}: {first}" if first else type(launcher_error).__name__


def job_row(manifest_path: Path) -> dict:
    run_dir = manifest_path.parent
    manifest = json.loads(manifest_path.read_text())
    stages = {s["name"]: s for s in manifest["stages"]}
    row = {"job": run_dir.name, "overrides": " ".join(manifest.get("overrides", [])),
           "_overrides": [str(override) for override in manifest.get("overrides", [])],
           "status": manifest.get("status"), "reason": run_reason(manifest), "validation": "-", "worst": "-",
           "fp16_flop_share": "-",
           "fp32_nodes": "-", "casts": "-", "engine_latency_ms": "-",
           "seconds": round(sum(s.get("seconds") or 0 for s in manifest["stages"]), 2), "run_dir": str(run_dir)}
    plan = stage_artifact(run_dir, stages.get("precision"), "plan")
    if plan:
        totals = plan["totals"]
        row.update(fp16_flop_share=f"{totals['low_precision_flop_share'] * 100:.1f}%",
                   fp32_nodes=totals["nodes"].get("fp32", 0), casts=totals["casts_added"])
    report = stage_artifact(run_dir, stages.get("validate"), "report")
    if report:
        row["validation"] = "passed" if report["passed"] else "FAILED"
        row["worst"] = _worst(report)
    row["_exit"] = manifest.get("exit_code", 0 if manifest.get("status") == "ok" else 1)
    row["exit_code"] = row["_exit"]
    return row


def write_summary(root: Path, rows: list[dict]) -> None:
    (root / "summary.md").write_text(markdown(rows) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    (root / "summary.csv").write_text(buffer.getvalue())


def markdown(rows: list[dict]) -> str:
    """One row per job, one line per row: a cell's newline or `|` (an override naming a file that
    holds one) is escaped (safe_text.py); summary.csv keeps the text as it is, quoted. The
    overrides every job has are one line above the table, the rows show the rest (module docstring)."""
    shown = [c for c in COLUMNS if c != "run_dir"]
    common = common_overrides(rows)
    lines = []
    if common:
        lines += ["Every job: " + " ".join(f"`{safe_text(o, markdown=True)}`" for o in common), ""]
    lines += ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for row in rows:
        cells = {**row, "overrides": _varying(row, common)}
        lines.append("| " + " | ".join(safe_text(cells.get(c, ""), markdown=True) for c in shown) + " |")
    return "\n".join(lines)


def common_overrides(rows: list[dict]) -> list[str]:
    """The overrides every job of two or more has, in the first job's order (a row without its
    list, e.g. a job known only by its directory's manifest of an older trtpipe, shares none)."""
    lists = [row.get("_overrides") for row in rows]
    if len(rows) < 2 or any(found is None for found in lists):
        return []
    return [override for override in lists[0] if all(override in others for others in lists[1:])]


def _varying(row: dict, common: list[str]) -> str:
    if not common:
        return row.get("overrides", "")
    return " ".join(override for override in row["_overrides"] if override not in common) or "-"


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


def _job_number(path: Path):
    name = path.parent.name
    return (0, int(name)) if name.isdigit() else (1, name)
