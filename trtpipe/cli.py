"""The `trtpipe` command: a thin layer over Hydra and `trtpipe.app.run_from_config`.

Decision: before Hydra creates a run directory, the command composes the config
once itself (a pre-flight). Config errors then print one line and exit 2 with
nothing written, instead of Hydra's multi-line report and exit code 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trtpipe.errors import EXIT_OK, UserError


def main() -> None:
    argv = sys.argv[1:]
    try:
        from trtpipe.config.locate import conf_dir
        from trtpipe.config.store import register_configs

        register_configs()
        config_dir = conf_dir()
        from trtpipe.config.preflight import preflight

        preflight(config_dir, argv)
    except UserError as error:
        print(f"trtpipe: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    sys.exit(_run_hydra(config_dir))


def _run_hydra(config_dir: Path) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from trtpipe.app import run_from_config

    exit_codes: list[int] = []

    def task(cfg) -> int:
        hydra_cfg = HydraConfig.get()
        code = run_from_config(
            cfg,
            run_dir=Path(hydra_cfg.runtime.output_dir),
            start_dir=Path(hydra.utils.get_original_cwd()),
            overrides=list(hydra_cfg.overrides.task),
        )
        exit_codes.append(code)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            return code  # the sweep goes on; the worst code is the sweep's exit code
        return code

    hydra.main(config_path=str(config_dir), config_name="config", version_base="1.3")(task)()
    return max(exit_codes, default=EXIT_OK)
