"""The command line's job runner: `trtpipe.api.execute` with errors turned into exit
codes and one-line messages (tracebacks only in debug mode)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from trtpipe.errors import EXIT_FAILED, EXIT_OK, OutOfMemory, UserError, is_out_of_memory
from trtpipe.runner.manifest import MANIFEST_NAME

log = logging.getLogger("trtpipe")

DEBUG_ENV = "TRTPIPE_DEBUG"


def debug_enabled(cfg: DictConfig | None = None) -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0") or bool(cfg is not None and cfg.get("debug"))


def run_from_config(cfg: DictConfig, run_dir: Path, start_dir: Path, overrides: list[str], before=None):
    """Run the pipeline; returns (exit code, RunResult or None, one-line reason or None when it
    passed). `before`: a RunDirSnapshot."""
    from trtpipe.api import PipelineFailed, execute

    try:
        result = execute(cfg, run_dir, start_dir, overrides, before=before)
    except UserError as error:
        if debug_enabled(cfg):
            log.exception("trtpipe: error: %s", error)
        else:
            log.error("trtpipe: error: %s", error)
        return error.exit_code, None, str(error)
    except KeyboardInterrupt as error:  # Ctrl-C or SIGTERM: the manifest says `interrupted`
        from trtpipe.runner.interrupt import Interrupted

        interrupted = Interrupted.of(error)
        log.error("%s", interrupted.one_line())
        return interrupted.exit_code, None, interrupted.one_line().removeprefix("trtpipe: ")
    except PipelineFailed as failed:
        log.info("trtpipe: FAILED (exit %d); manifest: %s", failed.result.exit_code, run_dir / MANIFEST_NAME)
        return failed.result.exit_code, failed.result, str(failed)
    except Exception as error:  # a defect in trtpipe: one line on the console, the traceback in the log
        if is_out_of_memory(error):  # e.g. a library that cannot be mapped at import: the machine's limit
            log.debug("out of memory", exc_info=True)
            failure = OutOfMemory("starting the run", error)
            log.error("trtpipe: error: %s", failure)
            return failure.exit_code, None, str(failure)
        if debug_enabled(cfg):
            raise
        log.debug("unexpected error", exc_info=True)
        log.error("trtpipe: internal error: %s: %s (traceback in %s; debug=true prints it)",
                  type(error).__name__, error, run_dir / "trtpipe.log")
        return EXIT_FAILED, None, f"internal error: {type(error).__name__}: {error}"
    log.info("trtpipe: ok; manifest: %s", run_dir / MANIFEST_NAME)
    return EXIT_OK, result, None
