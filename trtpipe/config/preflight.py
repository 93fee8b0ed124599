"""Compose a sweep's configs before Hydra runs, to report config errors in one line.

For a sweep (`-m`), each value of each swept key is composed once (the other keys
at their first value), so a typo in any value is caught before the first job; so is a
`validate.outputs.<name>` that names no output of the model (runner/output_preflight.py).
"""

from __future__ import annotations

from pathlib import Path

from trtpipe.config.check import check_config, config_error

# Hydra flags that print something instead of running; they need no pre-flight.
_INFO_FLAGS = ("help", "hydra_help", "info", "shell_completion", "cfg", "version", "resolve")


def preflight(config_dir: Path, argv: list[str]) -> None:
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:
        return  # let Hydra report its own usage error
    if any(getattr(args, flag, None) for flag in _INFO_FLAGS) or not args.multirun:
        return  # a single run's config errors are caught from Hydra's own composition
    from trtpipe.runner.output_preflight import check_before_sweep

    for overrides in _override_sets(args.overrides):
        check_before_sweep(compose_checked(config_dir, overrides), Path.cwd())


def compose_checked(config_dir: Path, overrides: list[str]):
    """Compose with Hydra's Compose API and run the strict checks; UserError on any problem."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from trtpipe.runner.pipeline import plan_stages

    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="trtpipe"):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        raise config_error(error) from error
    check_config(cfg)
    plan_stages(list(cfg.stages))
    return cfg


def _override_sets(overrides: list[str]) -> list[list[str]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise config_error(error) from error
    choices: list[list[str]] = []
    for override in parsed:
        prefix = override.get_key_element()
        if not override.is_sweep_override():
            choices.append([override.input_line])
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # glob() and other sweeps that need the config repository
            values = []
        choices.append([f"{prefix}={value}" for value in values])
    base = [options[0] for options in choices if options]
    sets = [base]
    for index, options in enumerate(choices):
        for option in options[1:]:
            variant = list(base)
            variant[sum(1 for o in choices[:index] if o)] = option
            sets.append(variant)
    return sets
