"""A single run (no `-m`, no Hydra flag) with the config composed once.

Decision: `hydra.main` composes the whole config twice for every run: once to read
`hydra.mode` (Hydra.get_mode, to tell a run from a sweep) and once to run it, ~0.17 s
each here, more than half of a fully cached run. When the command line holds only
overrides (nothing starting with `-`) and none of them sets `hydra.mode`, trtpipe
composes once for a run and reads `hydra.mode` from that composition:
- unset (or RUN): a run. trtpipe then does what hydra.main does on that path (Hydra 1.3
  `_run_hydra` -> `_run_app` with mode None: the override `hydra.mode=RUN` is recorded,
  and `Hydra.run` sets up logging and the run directory and runs the task) and nothing
  else, so `.hydra/hydra.yaml` is the same as hydra.main's.
- anything else (a recipe or user config with `hydra.mode: MULTIRUN` and sweeper params):
  a sweep, which hydra.main runs; nothing is set up by the first composition.
Every other command line (sweeps, --cfg, --info, --config-dir, shell completion,
`hydra.mode=...`) goes through hydra.main directly.
- Hydra's version_base is "1.3", as cli.py passes to hydra.main (without it Hydra falls
  back to 1.1 behaviour: `hydra.job.chdir=null` would change directory).
- The composition of a command line run before, with nothing it reads changed, is taken from
  memo/compose.py instead of composed again; the schemas and recipes are then registered in the
  ConfigStore only when something asks it (Hydra's debug output composes again). Everything
  after the composition is the same either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

VERSION_BASE = "1.3"  # also what cli.py gives hydra.main(version_base=...) for sweeps


def is_single_run(argv: list[str]) -> bool:
    return all(not arg.startswith("-") and not _sets_mode(arg) for arg in argv)


def _sets_mode(arg: str) -> bool:
    return arg.lstrip("+~").split("=", 1)[0].strip() == "hydra.mode"


def run_single(config_dir: Path, task: Callable, overrides: list[str]) -> bool:
    """Compose once and, when the config is a run, run `task` as Hydra's RUN mode would
    (exceptions propagate, as with HYDRA_FULL_ERROR=1). False: the composed config asks
    for another mode (a sweep); nothing ran and the caller hands the command to hydra.main."""
    import logging

    import hydra._internal.hydra as hydra_module
    from hydra import version
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext, RunMode

    from trtpipe.cache.cache_home import register_cache_resolver
    from trtpipe.memo import compose as compose_memo

    version.setbase(VERSION_BASE)  # what hydra.main(version_base="1.3") does first
    key = _memo_key(config_dir, overrides)
    cfg = compose_memo.load(key) if key else None
    registered = cfg is None  # the schemas and recipes are in the ConfigStore
    skipped = _register() if registered else []  # recipe files register_configs skipped, with a warning
    register_cache_resolver()  # cache.dir's default (register_configs registers it too)
    # A remembered composition had no source but these three (memo/compose.py), so the search path
    # is the one create_config_search_path makes, without discovering (importing) Hydra's plugins.
    search_path = create_config_search_path(str(config_dir)) if registered else _known_search_path(config_dir)
    hydra = Hydra.create_main_hydra2(task_name="trtpipe", config_search_path=search_path)
    try:
        if cfg is None:
            cfg = hydra.compose_config(config_name="config", overrides=list(overrides), run_mode=RunMode.RUN)
            if key and not skipped and cfg.hydra.mode in (None, RunMode.RUN):  # a sweep is hydra.main's
                compose_memo.save(key, cfg, config_dir)
        if cfg.hydra.mode not in (None, RunMode.RUN):
            return False
        run_overrides = list(overrides)
        if cfg.hydra.mode is None:  # as _run_app adds (and the composition records) `hydra.mode=RUN`
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
            run_overrides.append("hydra.mode=RUN")
        # The rest is Hydra.run after its composition (Hydra 1.3).
        configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        hydra_module.log = logging.getLogger(hydra_module.__name__)  # as compose_config(with_log_configuration)
        if hydra_module.log.isEnabledFor(logging.DEBUG) and not registered:
            _register()  # Hydra's debug output composes again, from the ConfigStore
        hydra._print_debug_info("config", run_overrides, RunMode.RUN)
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        ret = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                      task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                      configure_logging=True)
        callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
        _ = ret.return_value  # raises the task's exception, as Hydra.run does
        return True
    finally:
        GlobalHydra.instance().clear()


def _memo_key(config_dir: Path, overrides: list[str]) -> str | None:
    """compose_memo's key, or None where it cannot be formed (the composition then says why)."""
    from trtpipe.memo import compose as compose_memo

    try:
        return compose_memo.memo_key(config_dir, overrides)
    except Exception:  # e.g. TRTPIPE_RECIPES naming no folder: register_configs reports it
        return None


def _register() -> list:
    from trtpipe.config.store import register_configs

    return register_configs()


def _known_search_path(config_dir: Path):
    """Hydra's package, trtpipe's conf/ and the ConfigStore, as create_config_search_path orders them,
    and the three config source types they need registered (what Hydra's plugin scan registers first)."""
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource
    from hydra._internal.sources_registry import SourcesRegistry

    for source in (FileConfigSource, ImportlibResourcesConfigSource, StructuredConfigSource):
        SourcesRegistry.instance().register(source)  # idempotent

    search_path = ConfigSearchPathImpl()
    search_path.append("hydra", "pkg://hydra.conf")
    search_path.append("main", str(config_dir))
    search_path.append("schema", "structured://")
    return search_path
