"""Settings of a stage that is not in `stages` do nothing: say so, in one line per stage.

`promote_outputs.tensors=[t]` while `promote_outputs` is not in `stages` (it is
opt-in) was ignored without a word. Decisions:
- "Set" means different from the stage's default config (the choice conf/config.yaml's
  defaults list makes for the stage's group, over its schema), compared before
  interpolation; a setting equal to its default is not reported.
- Where it was set: an override on the command line (a key, a parent key or a group
  choice such as `sanitize=minimal`, named once as typed) or, otherwise, a recipe or
  user config. When the
  command line sets `stages` itself, only command-line settings are reported: a recipe
  configuring a stage the user then left out of `stages` is that user's choice.
- A setting another part of the config still reads is not reported: a listed stage's
  interpolation (`precision.search.tolerance: ${validate.tolerance}`) and
  `build.profiles` (profile 0's opt shapes size the sample inputs without a build).
- It is a warning, not an error: the run is still what the user asked for, minus a
  setting. The Fix is the `stages` override with the stage added in the one order
  that works (config/stage_order.py), quoted for the shell.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import lru_cache

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("trtpipe")

# Settings of a stage that matter without the stage: key -> who reads them.
USED_WITHOUT_STAGE = {"build.profiles": "profile 0's opt shapes size the sample inputs"}
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def warn_ignored_settings(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """Log (and return) one warning line per stage not in `stages` whose settings were changed."""
    lines = ignored_settings_lines(cfg, overrides)
    for line in lines:
        log.warning("%s", line)
    return lines


def ignored_settings_lines(cfg: DictConfig, overrides: list[str]) -> list[str]:
    from trtpipe.config.override_text import shell_quoted
    from trtpipe.config.stage_order import STAGE_ORDER

    listed = [str(name) for name in cfg.stages]
    unlisted = [stage for stage in STAGE_ORDER if stage not in listed and stage in cfg]
    if not unlisted:
        return []
    cli_keys = [_override_key(o) for o in overrides]
    cli_only = "stages" in cli_keys
    read = _referenced_keys(cfg, listed) | set(USED_WITHOUT_STAGE)
    lines = []
    for stage in unlisted:
        current = OmegaConf.to_container(cfg[stage], resolve=False)
        changed = [key for key in _changed_keys(_stage_default(stage), current, stage)
                   if not any(_overlaps(key, used) for used in read)]
        where = {key: "command line" if any(_overlaps(key, cli) for cli in cli_keys) else "recipe/config"
                 for key in changed}
        shown = [key for key in changed if where[key] == "command line" or not cli_only]
        if not shown:
            continue
        # A group choice (`precision=fp32`) changes many keys: it is named once, as typed.
        choice = next((o.lstrip("+") for o in overrides if _override_key(o) == stage and "=" in o), None)
        if choice is not None:  # keys only the choice changed are named by it
            shown = [choice] + [key for key in shown if where[key] != "command line"
                                or any(_overlaps(key, cli) and cli != stage for cli in cli_keys)]
            where[choice] = "command line"
        working = sorted([*[s for s in listed if s in STAGE_ORDER], stage], key=STAGE_ORDER.index)
        settings = ", ".join(f"{key} ({where[key]})" for key in shown)
        lines.append(f"trtpipe: warning: {settings} set but ignored: stage '{stage}' is not in 'stages'. "
                     f"Fix: to run it, add it to 'stages': {shell_quoted('stages=[' + ','.join(working) + ']')}")
    return lines


def _override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].strip().replace("/", ".")


def _overlaps(key: str, other: str) -> bool:
    return bool(other) and (key == other or key.startswith(other + ".") or other.startswith(key + "."))


def _referenced_keys(cfg: DictConfig, listed: list[str]) -> set[str]:
    """Keys the listed stages' configs interpolate (`${validate.tolerance}` -> validate.tolerance)."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, Mapping):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            found.update(_INTERPOLATION.findall(node))

    for stage in listed:
        if stage in cfg:
            walk(OmegaConf.to_container(cfg[stage], resolve=False))
    return found


def _changed_keys(default, current, prefix: str) -> list[str]:
    if isinstance(default, Mapping) and isinstance(current, Mapping):
        keys = list(dict.fromkeys([*default, *current]))
        return [key for name in keys
                for key in _changed_keys(default.get(name), current.get(name), f"{prefix}.{name}")]
    return [] if default == current else [prefix]


@lru_cache(maxsize=None)
def _stage_default_cached(stage: str) -> str:
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.store import _STAGE_SCHEMAS

    directory = conf_dir()
    choice = "default"
    for entry in OmegaConf.load(directory / "config.yaml").get("defaults", []):
        if isinstance(entry, (dict, DictConfig)) and stage in entry:
            choice = str(entry[stage])
    node = OmegaConf.structured(_STAGE_SCHEMAS[stage])
    path = directory / stage / f"{choice}.yaml"
    if path.is_file():
        loaded = OmegaConf.load(path)
        loaded.pop("defaults", None)
        node = OmegaConf.merge(node, loaded)
    return OmegaConf.to_yaml(node)


def _stage_default(stage: str) -> dict:
    """The stage's config as composed with no override (unresolved)."""
    return OmegaConf.to_container(OmegaConf.create(_stage_default_cached(stage)), resolve=False)
