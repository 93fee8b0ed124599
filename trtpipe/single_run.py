"""A single run (no `-m`, no Hydra flag) with the config composed once.

Decision: `hydra.main` composes the whole config twice for every run: once to read
`hydra.mode` (Hydra.get_mode, to tell a run from a sweep) and once to run it, ~0.17 s
each here, more than half of a fully cached run. When the command line holds only
overrides (nothing starting with `-`) and none of them sets `hydra.mode`, the answer
is known without composing: a run. Then trtpipe does what hydra.main does on that path
(Hydra 1.3 `_run_hydra` -> `_run_app` with mode None: the override `hydra.mode=RUN`
is added and `Hydra.run` composes, sets up logging and the run directory, and runs
the task) and nothing else. Every other command line (sweeps, --cfg, --info,
--config-dir, shell completion, `hydra.mode=...`) still goes through hydra.main.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def is_single_run(argv: list[str]) -> bool:
    return all(not arg.startswith("-") and not _sets_mode(arg) for arg in argv)


def _sets_mode(arg: str) -> bool:
    return arg.lstrip("+~").split("=", 1)[0].strip() == "hydra.mode"


def run_single(config_dir: Path, task: Callable, overrides: list[str]) -> None:
    """Compose once and run `task` as Hydra's RUN mode would (exceptions propagate,
    as with HYDRA_FULL_ERROR=1)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    search_path = create_config_search_path(str(config_dir))
    hydra = Hydra.create_main_hydra2(task_name="trtpipe", config_search_path=search_path)
    try:
        hydra.run(config_name="config", task_function=task, overrides=[*overrides, "hydra.mode=RUN"])
    finally:
        GlobalHydra.instance().clear()
