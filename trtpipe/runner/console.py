"""What reaches the terminal: the pipeline's own lines; details go to the log file.

Decisions:
- Graph passes log every decision (a LayerNorm fused or refused and why) at INFO;
  that detail belongs in `trtpipe.log` in the run directory. The console shows one
  line per stage from the `trtpipe` logger (all `trtpipe.*` loggers with
  `--verbose`, none with `--quiet`), and every warning and error on stderr, so
  scripts can separate them from progress on stdout.
- `--json`: the progress lines go to stderr too, and stdout carries exactly one
  JSON summary per run (the last line), for CI jobs.
- No colours are ever written. Progress on a long stage (`StageProgress`) is written only
  when stdout is a terminal, so logs and pipes stay clean.
- Nor does a model write them: `SafeLines` escapes every control character of every
  console line (safe_text.py), a net under the writers that escape the names they print
  (a newline inside a name can only be told from a line break where the name is known).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

from trtpipe.runner.manifest import MANIFEST_NAME
from trtpipe.safe_text import safe_text

PIPELINE_LOGGER = "trtpipe"


class PipelineLines(logging.Filter):
    """stdout: INFO lines of the pipeline logger (of every trtpipe logger when verbose)."""

    verbose = False
    quiet = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not logging.INFO <= record.levelno < logging.WARNING or self.quiet:
            return False  # debug detail (tracebacks) is for the log file only
        shown = record.name == PIPELINE_LOGGER or (self.verbose and record.name.startswith(PIPELINE_LOGGER + "."))
        if shown:
            StageProgress.clear()  # a line printed under the progress line would start in its middle
        return shown


class StageProgress:
    """On a terminal, a line under a stage's `running...` that counts the seconds while it runs
    (issue 33, item 7: a 70 s sanitize showed only `running...`). From the first second on,
    rewritten in place twice a second (`\r`), cleared before any other console line and when the
    stage ends, so the terminal keeps exactly the lines a pipe gets.

    Decision: only where `configure_console` enabled it (the command line, not --json or --quiet)
    and only when stdout is a TTY: no carriage returns in CI logs, files or the Python API."""

    enabled = False
    AFTER_S, EVERY_S = 1.0, 0.5
    _lock = threading.Lock()
    _stop: threading.Event | None = None
    _shown = False
    _quiet_until = 0.0

    @classmethod
    def start(cls, stage: str) -> None:
        if not cls.enabled:
            return
        cls.stop()
        stop = cls._stop = threading.Event()
        started = time.monotonic()

        def tick() -> None:
            spinner = "|/-\\"
            turn = 0
            while not stop.wait(cls.AFTER_S if turn == 0 else cls.EVERY_S):
                turn += 1
                with cls._lock:
                    if stop.is_set() or time.monotonic() < cls._quiet_until:
                        continue
                    elapsed = time.monotonic() - started
                    sys.stdout.write(f"\r    {spinner[turn % 4]} {stage} running, {elapsed:.0f} s\x1b[K")
                    sys.stdout.flush()
                    cls._shown = True

        threading.Thread(target=tick, name="trtpipe-progress", daemon=True).start()

    @classmethod
    def stop(cls) -> None:
        if cls._stop is not None:
            cls._stop.set()
            cls._stop = None
        cls.clear()

    @classmethod
    def clear(cls) -> None:
        with cls._lock:
            cls._quiet_until = time.monotonic() + cls.EVERY_S  # the line about to print keeps the row
            if cls._shown:
                sys.stdout.write("\r\x1b[K")
                sys.stdout.flush()
                cls._shown = False


class SafeLines(logging.Formatter):
    """The console's formatter: each line of a message with its control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(safe_text(line) for line in super().format(record).split("\n"))


class Problems(logging.Filter):
    """stderr: every warning and error, from any logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def configure_console(*, json_mode: bool, quiet: bool, verbose: bool) -> None:
    """Adjust the handlers Hydra set up from conf/hydra/job_logging/trtpipe.yaml."""
    for handler in logging.getLogger().handlers:
        for line_filter in (f for f in handler.filters if isinstance(f, PipelineLines)):
            line_filter.quiet, line_filter.verbose = quiet, verbose
            if json_mode and isinstance(handler, logging.StreamHandler):
                handler.setStream(sys.stderr)
    StageProgress.enabled = not (json_mode or quiet) and _is_terminal(sys.stdout)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def json_summary(code: int, run_dir: Path, result) -> dict:
    """The machine-readable end of a run (the last stdout line with --json)."""
    summary = {"run_dir": str(run_dir), "exit_code": code,
               "status": {0: "ok", 1: "failed", 2: "user_error", 130: "interrupted", 143: "interrupted"}.get(code, "failed"),
               "manifest": None, "stages": [], "validation": None}
    if result is None and (run_dir / MANIFEST_NAME).is_file() and code > 128:  # interrupted: a manifest, no result
        summary["manifest"] = str(run_dir / MANIFEST_NAME)
    if result is not None:
        summary["manifest"] = str(run_dir / MANIFEST_NAME)
        summary["stages"] = [{"name": s.name, "status": s.status, "seconds": s.seconds, "summary": s.summary,
                              "origin": s.origin} for s in result.stages]
        if result.validation is not None:
            summary["validation"] = {
                "passed": result.validation["passed"],
                "candidates": {c["name"]: c["passed"] for c in result.validation["candidates"]},
            }
    return summary
