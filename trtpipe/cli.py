"""The `trtpipe` command: a thin layer over Hydra and `trtpipe.api.execute`.

Decisions:
- Config errors print one line and exit 2 with nothing written. For a single run,
  Hydra's own composition error is caught (HYDRA_FULL_ERROR makes Hydra re-raise
  it instead of printing a multi-line report and exiting 1); composition happens
  before Hydra creates the run directory, so nothing is left behind.
- For a sweep (`-m`), every value of every swept key is composed once before the
  first job starts (`preflight`), so a typo in the last value does not surface
  after an hour of jobs.
- trtpipe's own switches (`--json`, `--quiet`, `--verbose`, `--no-remote`) are taken out of argv
  before Hydra parses it; Hydra has no flags of these names. `--no-remote` is the override
  `cache.remote=null`, appended last (an earlier `cache.remote=...` override is dropped).
- `--quiet`: a successful run prints its run directory, one line on stdout, so
  scripts can find its files (a sweep: one line per job); nothing else on stdout
  (Hydra's launcher lines are raised to WARNING, the sweep table only written to
  summary.md).
- `--help` and `--version` are trtpipe's, answered before Hydra is imported (cli_help.py)
  but inside the error handling (a bad TRTPIPE_RECIPES is one line, exit 2);
  a single run composes its config once (single_run.py).
- `--quiet` adds `++hydra.hydra_logging.root.level=WARNING`: `++`, so it also works when
  the chosen hydra_logging has no root level (hydra/hydra_logging=none).
- `trtpipe verify ...`, `trtpipe cache ...`, `trtpipe inspect ...` and `trtpipe reduce ...` are
  `trtpipe-verify ...`, `trtpipe-cache ...`, `trtpipe-inspect ...` and `trtpipe-reduce ...` (issue 33 item 3): the first word is handed to that command's `main` with the rest of argv,
  untouched (their own `--json`, `--help`). Delegating rather than refusing with "the command is
  trtpipe-verify": users type the subcommand form (git, pip, docker taught them), and a bare word
  is never a Hydra override (an override has `=`, a flag starts with `-`), so no run of today
  changes meaning. The subcommands keep their own names in their messages (`trtpipe-verify:`),
  the commands the docs and scripts use.
"""

from __future__ import annotations

import json
import signal
import os
import sys
from pathlib import Path

from trtpipe.errors import EXIT_OK, UserError, exit_reader_gone
from trtpipe.runner.interrupt import (Interrupted, install_signal_handlers, launcher_workers_start_with_sigint_blocked,
                                      worker_job_signals)

OWN_FLAGS = {"--json": "json", "--quiet": "quiet", "-q": "quiet", "--verbose": "verbose", "--no-remote": "no_remote"}


# `trtpipe WORD ...` -> the command of that name, as "module:function" (imported only when asked).
SUBCOMMANDS = {"verify": "trtpipe.verify:main", "cache": "trtpipe.cache_cli:main",
               "inspect": "trtpipe.inspect_model.command:main", "reduce": "trtpipe.reduce.command:main"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        _subcommand(sys.argv[1], sys.argv[2:])
    try:
        _main()
    except BrokenPipeError:  # `trtpipe --help | head`: the reader left; no traceback
        exit_reader_gone()
    except SystemExit as done:  # every exit: the outcome (and its exit code) is decided
        _further_signals_keep_the_outcome(done.code)
        raise


def _main() -> None:
    import logging

    # A closed pipe (`trtpipe ... | head`) must not make logging print tracebacks.
    logging.raiseExceptions = False
    switches = {name: False for name in OWN_FLAGS.values()}
    argv = []
    for arg in sys.argv[1:]:
        if arg in OWN_FLAGS:
            switches[OWN_FLAGS[arg]] = True
        else:
            argv.append(arg)
    if switches["quiet"] and not any(a.lstrip("+").startswith("hydra.hydra_logging.root.level=") for a in argv):
        # No `[HYDRA] Launching 2 jobs` on stdout. `++`: also with hydra/hydra_logging=none (no root key).
        argv.append("++hydra.hydra_logging.root.level=WARNING")
    if switches["no_remote"]:  # cache.remote=null for this run, whatever an override or recipe says
        argv = [a for a in argv if not a.lstrip("+~").startswith("cache.remote=")] + ["cache.remote=null"]
    sys.argv[1:] = argv
    install_signal_handlers()
    try:
        if {"--help", "-h", "--version"} & set(argv):  # inside: a bad TRTPIPE_RECIPES is one line, exit 2
            from trtpipe.cli_help import help_text, version_text

            print(version_text() if "--version" in argv else help_text())
            sys.exit(EXIT_OK)
        from trtpipe.cache.cache_home import pin_cache_env
        from trtpipe.config.completion import completion_output
        from trtpipe.config.locate import conf_dir
        from trtpipe.config.preflight import preflight
        from trtpipe.config.store import register_configs
        from trtpipe.runner.rundir import snapshot_from_argv, start_directory
        from trtpipe.single_run import is_single_run

        from trtpipe.sweep_launch import ray_overrides

        start = start_directory()  # a deleted working directory: one line, exit 2, before anything
        argv = ray_overrides(argv, start, quiet_stdout=switches["json"] or switches["quiet"])  # hydra/launcher=ray
        sys.argv[1:] = argv
        if not is_single_run(argv):  # a single run registers them when it composes (single_run.py)
            register_configs()
        config_dir = conf_dir()
        preflight(config_dir, argv)
        snapshot_from_argv(argv, start)  # before Hydra creates the run directory
        pin_cache_env(start)  # a relative TRTPIPE_CACHE: from here, not from each job's directory
        with completion_output(argv):  # shell completion offers +recipe=, not recipe= (config/completion.py)
            code = _run_hydra(config_dir, switches)
        sys.exit(code)
    except UserError as error:
        print(f"trtpipe: error: {error}", file=sys.stderr)
        if switches["json"]:
            print(json.dumps({"status": "user_error", "exit_code": error.exit_code, "error": str(error)}))
        sys.exit(error.exit_code)
    except KeyboardInterrupt as error:  # outside a job (startup, Hydra): one line, 130 or 143
        interrupted = Interrupted.of(error)
        print(interrupted.one_line(), file=sys.stderr)
        if switches["json"]:
            print(json.dumps({"status": "interrupted", "exit_code": interrupted.exit_code}))
        sys.exit(interrupted.exit_code)



def _subcommand(word: str, argv: list[str]) -> None:
    """`trtpipe verify RUN_DIR` is `trtpipe-verify RUN_DIR` (module docstring); it exits itself."""
    import importlib

    module, _, function = SUBCOMMANDS[word].partition(":")
    getattr(importlib.import_module(module), function)(argv)
    sys.exit(EXIT_OK)  # a main that returns (none does today) has succeeded


def _further_signals_keep_the_outcome(code) -> None:
    """Decision: once the command has decided its outcome (the manifest or the sweep's summary
    written, its last line printed, its exit code chosen), a SIGINT/SIGTERM arriving while the
    interpreter shuts down keeps that exit code. Left to the run's handler, it raised Interrupted
    inside an exit hook (loky joining its threads: an "Exception ignored" traceback, and exit 0
    after Ctrl-C), or, once CPython's finalization had put the default handlers back, killed the
    process by the signal (-2 instead of 130). Both seen in the 1,000-case sweep fuzz run with
    Ctrl-C sent as a sweep was ending. Two phases:
    - while threads are joined (a library's exit hook waiting for its workers), the signal ends
      the process at once with the outcome's code: a shutdown that hangs stays stoppable;
    - from trtpipe's own exit hook on (registered now, so it runs first of the `atexit` hooks,
      after the thread joins), the signals are ignored: a Python handler is replaced by the
      default at finalization, an ignored signal stays ignored.
    A signal before the outcome is decided is the run's: exit 130/143."""
    import atexit

    exit_code = code if isinstance(code, int) else 0 if code is None else 1  # sys.exit("text") is 1

    def end_now(_signum, _frame) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a flush already under way when the signal came: its bytes are out or lost
                pass
        os._exit(exit_code)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, end_now)
    atexit.register(_ignore_signals)


def _ignore_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _run_hydra(config_dir: Path, switches: dict) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from trtpipe.app import run_from_config
    from trtpipe.config.check import config_error
    from trtpipe.runner.console import configure_console, json_summary
    from trtpipe.runner.rundir import explicit_snapshot, run_dir_error, snapshot_for
    from trtpipe.runner.sweep_jobs import SweepJob
    from trtpipe.sweep_launch import job_environment, launch_environment, ray_job_signals, uses_ray

    exit_codes: list[int] = []
    on_ray = uses_ray(sys.argv[1:])
    launch_env = launch_environment(sys.argv[1:])  # taken here, set in the job's process (a Ray worker)
    if switches["quiet"]:
        from trtpipe.runner.sweep_summary import SweepSummary

        SweepSummary.quiet = True

    def task(cfg) -> int:
        # a joblib worker: Ctrl-C between jobs is the sweep's; a Ray worker: the launching process's values
        with job_environment(launch_env), worker_job_signals() as signalled_before:
            return job_task(cfg, signalled_before)

    def job_task(cfg, signalled_before: bool) -> int:
        configure_console(json_mode=switches["json"], quiet=switches["quiet"], verbose=switches["verbose"])
        hydra_cfg = HydraConfig.get()
        run_dir = Path(hydra_cfg.runtime.output_dir)
        mode_key = "sweep" if hydra_cfg.mode == RunMode.MULTIRUN else "run"
        pattern = OmegaConf.to_container(hydra_cfg[mode_key], resolve=False).get("dir")
        start_dir = Path(hydra.utils.get_original_cwd())
        before = snapshot_for(run_dir, str(pattern))
        signalled = signal.SIGINT if signalled_before else None  # Ctrl-C reached this worker before the job
        job = SweepJob.of(hydra_cfg, start_dir, run_dir, signalled) if mode_key == "sweep" else None
        if job is not None and job.sweep_was_interrupted():  # no job starts work after Ctrl-C
            before.remove_new()
            return EXIT_OK
        with ray_job_signals(job.sweep_dir if job else start_dir, enabled=on_ray and job is not None):
            code, result, reason = run_from_config(cfg, run_dir=run_dir, start_dir=start_dir,
                                                   overrides=list(hydra_cfg.overrides.task), before=before)
        if job is not None:  # every job, a user error's too, has its line in the summary
            job.ended(code, reason, manifest=result is not None or code > 128)
        exit_codes.append(code)  # a sweep goes on after a failed job; its exit code is the worst
        if switches["json"]:
            print(json.dumps(json_summary(code, run_dir, result)), flush=True)
        elif switches["quiet"] and code == EXIT_OK:  # the one stdout line: `dir=$(trtpipe --quiet ...)`
            print(run_dir, flush=True)
        if code > 128:  # interrupted (reported in one line already): a sweep stops here too
            raise SystemExit(code)
        return code

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        from trtpipe.single_run import VERSION_BASE, is_single_run, run_single

        # A config whose hydra.mode is a sweep (a recipe's `hydra.mode: MULTIRUN`) goes to hydra.main.
        if not (is_single_run(sys.argv[1:]) and run_single(config_dir, task, sys.argv[1:])):
            _run_sweep(lambda: hydra.main(config_path=str(config_dir), config_name="config",
                                          version_base=VERSION_BASE)(task)(), on_ray)
    except (HydraException, OmegaConfBaseException) as error:
        if exit_codes:  # raised after a job ran: not a config error of the user's
            raise
        raise config_error(error) from error
    except BrokenPipeError:  # stdout's reader left (`trtpipe -sc install=bash | head -1`): 141 in main()
        raise
    except (OSError, ValueError) as error:  # Hydra creating the run directory, .hydra/ or the log file
        before = explicit_snapshot()
        key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(sys.argv[1:]) else "hydra.run.dir"
        user_error = None if exit_codes else run_dir_error(error, before.run_dir if before else None, key)
        if user_error is None:
            raise
        if before is not None:  # a half-written .hydra/ on a full disk: remove what this run added
            before.remove_new()
        raise user_error from error
    from trtpipe.runner.sweep_summary import SweepSummary

    # Jobs run by other processes (joblib, submitit) report through their records (runner/sweep_jobs.py).
    return max([*exit_codes, SweepSummary.last_exit_code], default=EXIT_OK)


def _run_sweep(run, on_ray: bool = False) -> None:
    """hydra.main, and the sweep's summary even when the launcher stops it.

    Decision: a joblib worker killed (kill -9, the OOM killer) makes loky raise in this
    process, and Ctrl-C raises here too; Hydra then never calls on_multirun_end. The summary
    is written (every job with its status) and the error is one line: exit code the worst
    job's (137 for a job killed by SIGKILL), 130/143 for a signal here."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from trtpipe.runner.sweep_summary import SweepSummary, finish, launcher_stop
    from trtpipe.runner.sweep_jobs import mark_stopped
    from trtpipe.sweep_launch import settle

    launcher_workers_start_with_sigint_blocked()
    try:
        run()
        if SweepSummary.last_signal is not None:  # the signal came, but every job had ended by itself
            print(f"trtpipe: interrupted; every job's status: {SweepSummary.last_summary}", file=sys.stderr)
    except (KeyboardInterrupt, SystemExit, OSError, ValueError, HydraException, OmegaConfBaseException):
        # Then reported as before: interrupted (a job's SystemExit(130) in this process: the basic
        # launcher), or the run directory's or config's error. Ray's jobs end first (sweep_launch.py).
        if on_ray:
            try:
                settle(SweepSummary.sweep_dir)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, write the summary now
                pass
        finish()
        raise
    except Exception as error:
        if SweepSummary.sweep_dir is None:  # no sweep under way
            raise
        mark_stopped(SweepSummary.sweep_dir)  # no job starts after this (a Ray worker freed by the death)
        summary = finish(error)
        code, why = launcher_stop(error)
        print(f"trtpipe: the sweep stopped: {why}; every job's status: {summary or 'no summary written'}",
              file=sys.stderr)
        # The stop's own code (137 for a worker killed by SIGKILL) even when the killed worker's job
        # had ended and no row carries it: the jobs it left unstarted are the kill's doing (the sweep
        # fuzz run: a worker killed between jobs ended the sweep 1, its unstarted user error unseen).
        SweepSummary.last_exit_code = max(SweepSummary.last_exit_code, code)
