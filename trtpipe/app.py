"""Run a composed config: the plain function the command line is a thin layer over."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from omegaconf import DictConfig

from trtpipe.config.check import check_config
from trtpipe.errors import EXIT_FAILED, EXIT_OK, UserError
from trtpipe.runner.pipeline import run_pipeline

log = logging.getLogger("trtpipe")

DEBUG_ENV = "TRTPIPE_DEBUG"


def debug_enabled(cfg: DictConfig | None = None) -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0") or bool(cfg is not None and cfg.get("debug"))


def run_from_config(cfg: DictConfig, run_dir: Path, start_dir: Path, overrides: list[str]) -> int:
    """Run the pipeline; return the exit code. Tracebacks only in debug mode."""
    try:
        check_config(cfg, overrides)
        result = run_pipeline(cfg, run_dir, start_dir, overrides)
    except UserError as error:
        if debug_enabled(cfg):
            log.exception("trtpipe: error: %s", error)
        else:
            log.error("trtpipe: error: %s", error)
        remove_hydra_leftovers(run_dir)
        return error.exit_code
    except Exception as error:  # a defect in trtpipe: one line on the console, the traceback in the log
        if debug_enabled(cfg):
            raise
        log.debug("unexpected error", exc_info=True)
        log.error("trtpipe: internal error: %s: %s (traceback in %s; debug=true prints it)",
                  type(error).__name__, error, run_dir / "trtpipe.log")
        return EXIT_FAILED
    verdict = "ok" if result.exit_code == EXIT_OK else f"FAILED (exit {result.exit_code})"
    log.info("trtpipe: %s; manifest: %s", verdict, run_dir / "manifest.json")
    return result.exit_code


def remove_hydra_leftovers(run_dir: Path) -> None:
    """A run stopped by a user error before any stage leaves nothing behind.

    Decision: Hydra creates the run directory (its `.hydra/` and log file) before
    trtpipe sees the config; only those are removed, and the directory only if it
    is then empty, so a user-chosen directory with other files is never emptied.
    """
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    (run_dir / "trtpipe.log").unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass
