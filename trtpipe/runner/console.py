"""What reaches the terminal: the pipeline's own lines; details go to the log file.

Decisions:
- Graph passes log every decision (a LayerNorm fused or refused and why) at INFO;
  that detail belongs in `trtpipe.log` in the run directory. The console shows one
  line per stage from the `trtpipe` logger (all `trtpipe.*` loggers with
  `--verbose`, none with `--quiet`), and every warning and error on stderr, so
  scripts can separate them from progress on stdout.
- `--json`: the progress lines go to stderr too, and stdout carries exactly one
  JSON summary per run (the last line), for CI jobs.
- No colours and no progress bars are ever written, so logs stay clean when stdout
  is not a terminal.
- Nor does a model write them: `SafeLines` escapes every control character of every
  console line (safe_text.py), a net under the writers that escape the names they print
  (a newline inside a name can only be told from a line break where the name is known).
"""

from __future__ import annotations

import logging
import sys
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
        if record.name == PIPELINE_LOGGER:
            return True
        return self.verbose and record.name.startswith(PIPELINE_LOGGER + ".")


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
