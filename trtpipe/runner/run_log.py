"""The run's `trtpipe.log` for an API run, without touching the caller's logging.

Decisions:
- The file gets every record of the `trtpipe` logger down to DEBUG, like the command
  line's log. That needs the `trtpipe` logger at DEBUG for the run, which alone would
  also push DEBUG records into the caller's root handlers; so during the run the
  logger does not propagate and its own handlers step aside, and a forwarding
  handler passes on to them and to the caller's handlers exactly the records the caller's own level let through before (the level
  the `trtpipe` logger had, or inherited, when the run started).
- Afterwards the `trtpipe` logger's level, handlers and propagation are restored as
  they were; the root logger is never touched.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] %(message)s"


class _ToCallersHandlers(logging.Handler):
    """What the logger would have done with the record: its own handlers, then (when it
    propagates) its parents' handlers, then the last resort when there were none."""

    def __init__(self, logger: logging.Logger, own: list[logging.Handler], propagate: bool, level: int) -> None:
        super().__init__(level)
        self.logger, self.own, self.propagate = logger, own, propagate

    def emit(self, record: logging.LogRecord) -> None:
        found = 0
        chain = [self.own]
        parent = self.logger.parent if self.propagate else None
        while parent is not None:
            chain.append(parent.handlers)
            parent = parent.parent if parent.propagate else None
        for handlers in chain:
            for handler in handlers:
                found += 1
                if record.levelno >= handler.level:
                    handler.handle(record)
        last = logging.lastResort
        if not found and last is not None and record.levelno >= last.level:
            last.handle(record)


@contextmanager
def run_log(log_file: Path, logger_name: str = "trtpipe"):
    """Write `logger_name`'s records (DEBUG and up) to `log_file` for the duration."""
    logger = logging.getLogger(logger_name)
    saved = (logger.level, logger.propagate, list(logger.handlers))
    to_file = logging.FileHandler(log_file)
    to_file.setFormatter(logging.Formatter(FORMAT))
    to_file.setLevel(logging.DEBUG)
    forward = _ToCallersHandlers(logger, saved[2], saved[1], logger.getEffectiveLevel())
    for handler in saved[2]:
        logger.removeHandler(handler)
    logger.addHandler(to_file)
    logger.addHandler(forward)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(to_file)
        logger.removeHandler(forward)
        for handler in saved[2]:
            logger.addHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        to_file.close()
