"""What reaches the terminal: the pipeline's own lines; details go to the log file.

Decision: graph passes log every decision (a LayerNorm fused or refused and why) at
INFO; that detail belongs in `trtpipe.log` in the run directory. The console shows
one line per stage from the `trtpipe` logger, plus every warning and error (on
stderr, so scripts can separate them from progress on stdout).
"""

from __future__ import annotations

import logging

PIPELINE_LOGGER = "trtpipe"


class PipelineLines(logging.Filter):
    """stdout: INFO lines of the pipeline logger only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == PIPELINE_LOGGER and record.levelno < logging.WARNING


class Problems(logging.Filter):
    """stderr: every warning and error, from any logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING
