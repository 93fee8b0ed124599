"""The `trtpipe` command: a thin layer over Hydra and `trtpipe.app.run_from_config`.

Decisions:
- Config errors print one line and exit 2 with nothing written. For a single run,
  Hydra's own composition error is caught (HYDRA_FULL_ERROR makes Hydra re-raise
  it instead of printing a multi-line report and exiting 1); composition happens
  before Hydra creates the run directory, so nothing is left behind.
- For a sweep (`-m`), every value of every swept key is composed once before the
  first job starts (`preflight`), so a typo in the last value does not surface
  after an hour of jobs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trtpipe.errors import EXIT_OK, UserError


def main() -> None:
    try:
        from trtpipe.config.locate import conf_dir
        from trtpipe.config.preflight import preflight
        from trtpipe.config.store import register_configs

        register_configs()
        config_dir = conf_dir()
        preflight(config_dir, sys.argv[1:])
        sys.exit(_run_hydra(config_dir))
    except UserError as error:
        print(f"trtpipe: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)


def _run_hydra(config_dir: Path) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from trtpipe.app import run_from_config
    from trtpipe.config.check import config_error

    exit_codes: list[int] = []

    def task(cfg) -> int:
        hydra_cfg = HydraConfig.get()
        code = run_from_config(
            cfg,
            run_dir=Path(hydra_cfg.runtime.output_dir),
            start_dir=Path(hydra.utils.get_original_cwd()),
            overrides=list(hydra_cfg.overrides.task),
        )
        exit_codes.append(code)  # a sweep goes on after a failed job; its exit code is the worst
        return code

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        hydra.main(config_path=str(config_dir), config_name="config", version_base="1.3")(task)()
    except (HydraException, OmegaConfBaseException) as error:
        if exit_codes:  # raised after a job ran: not a config error of the user's
            raise
        raise config_error(error) from error
    return max(exit_codes, default=EXIT_OK)
