"""`trtpipe --help` and `trtpipe --version`, answered without Hydra.

Decisions:
- Both are printed by trtpipe, not by Hydra. Hydra's `--help` composes the config once
  per config group (84 compositions, ~1.2 s here) and lists schema internals (the
  `schema` option of every group, `trtpipe_schema`); Hydra's `--version` prints Hydra's
  version. Here the help is read from the file system (conf/ groups, recipe files), so it
  starts in the time Python takes to start, and `--version` names the tools that change
  trtpipe's artifacts.
- Versions come from package metadata (trtpipe/cache/tools.py): nothing is imported, TensorRT
  least of all; a tool that is not installed says so.
- The composed config itself stays one command away: `trtpipe --cfg job [overrides]`;
  Hydra's own flags: `trtpipe --hydra-help`.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

# Tools whose versions `--version` prints after trtpipe's (importable module names; the
# distribution may have another name: onnxruntime-gpu, tensorrt-cu12, tensorrt-cu13...).
VERSION_TOOLS = ("onnx", "onnxruntime", "polygraphy", "tensorrt")
# Config group options that are schema plumbing, not choices for a user.
_INTERNAL_OPTIONS = {"schema"}

# A recipe description's labelled part (`Criterion:`, `Usually overridden:`) starts a new line.
_LABEL = re.compile(r"[A-Z][a-z]+( [a-z]+)?: ")
# Descriptions are wrapped to this width under the recipe's name (31 columns in): 88 in all.
_WRAP_AT = 57

_HEADER = """\
trtpipe: ONNX -> accurate TensorRT engine, as a cached pipeline of stages.

Usage: trtpipe [+recipe=NAME] [key=value ...] [--json] [--quiet] [--verbose] [--no-remote]
       trtpipe -m KEY=A,B ...            a sweep (one run per value)
       trtpipe --cfg job [overrides]     print the composed config (every setting)
       trtpipe verify RUN_DIR            rebuild a run and compare it (trtpipe-verify --help)
       trtpipe cache info|prune|clear    the artifact cache (trtpipe-cache --help)
       trtpipe inspect MODEL             a model and what the stages would do (trtpipe-inspect --help)
       trtpipe reduce RUN_DIR            a failed run's smallest failing subgraph (trtpipe-reduce --help)
       trtpipe --version | --help | --hydra-help"""

_FOOTER = """\
Exit codes: 0 success, 1 a stage failed, 2 a user error, 130/143 interrupted (Ctrl-C/SIGTERM).
Cache: {cache}; cache.dir=PATH or TRTPIPE_CACHE=PATH changes it. Full tracebacks: debug=true.
A remote cache: cache.remote=s3://BUCKET/PREFIX (needs boto3: the `remote` extra); --no-remote for one run."""


def version_text() -> str:
    from trtpipe import __version__

    lines = [f"trtpipe {__version__}"]
    for tool in VERSION_TOOLS:
        lines.append(f"  {tool:12} {_module_version(tool) or 'not installed'}")
    return "\n".join(lines)


def _module_version(module: str) -> str | None:
    """The version of the distribution that installs `module`: the distribution of the same name,
    else (one metadata scan, only then) whichever installs it, named: `10.8.0 (tensorrt-cu12)`."""
    from importlib import metadata

    from trtpipe.cache.tools import distribution_version

    version = distribution_version(module)
    if version:
        return version
    for distribution in sorted(set(metadata.packages_distributions().get(module, []))):
        version = distribution_version(distribution)
        if version:
            return f"{version} ({distribution})"
    return None


def help_text() -> str:
    from trtpipe.config.locate import USER_RECIPES_ENV, conf_dir, recipe_dirs
    from trtpipe.cache.cache_home import default_cache_dir_text
    from trtpipe.models.catalog import BUILTIN_MODULES  # the names only: no onnx import

    parts = [_HEADER, "", "Recipes (+recipe=NAME):"]
    dirs = recipe_dirs()
    for index, directory in enumerate(dirs):
        where = "shipped" if index == 0 else f"user, from {USER_RECIPES_ENV}"
        parts.append(f"  {directory}  ({where})")
        for path in sorted(directory.glob("*.yaml")):
            description = _recipe_description(path) or [""]
            if index > 0:  # a user's file may not be a recipe at all (shipped ones are tested)
                description = _unreadable(path) or description
            parts.append(f"    {path.stem:26} {description[0]}".rstrip())
            parts += [f"{'':31}{line}" for line in description[1:]]
    if len(dirs) == 1:
        parts.append(f"  user recipes: set {USER_RECIPES_ENV}=DIR[{os.pathsep}DIR...] (YAML files "
                     "starting with '# @package _global_')")
    parts += ["", "Config groups (group=option):"]
    groups = _config_groups(conf_dir())
    for group, options in groups.items():
        parts.append(f"  {group:16} {', '.join(options)}")
    parts += ["", "Settings (key=value; see them all with trtpipe --cfg job):",
              "  model.path, model.builtin, stages, data.*, cache.dir, " + ", ".join(f"{g}.*" for g in groups),
              "", "Built-in example models (model.builtin=NAME, used when model.path is unset):",
              f"  {', '.join(BUILTIN_MODULES)}",
              "", _FOOTER.format(cache=default_cache_dir_text())]
    return "\n".join(parts)


def _config_groups(root: Path) -> dict[str, list[str]]:
    """conf/<group>/*.yaml (a checkout or a wheel), Hydra's own group and schema options left out."""
    groups = {}
    for group in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "hydra"):
        options = sorted(p.stem for p in group.glob("*.yaml") if p.stem not in _INTERNAL_OPTIONS)
        if options:
            groups[group.name] = options
    return groups


def _unreadable(path: Path) -> list[str]:
    """For a user's recipe file that cannot be loaded: what `trtpipe --help` says instead of its
    description. Decision: checked with PyYAML's safe loader, not OmegaConf (the help imports
    neither Hydra nor OmegaConf); the rare file only OmegaConf refuses (a duplicate key) is still
    refused, with its reason, by the run that asks for it."""
    import yaml

    from trtpipe.config.locate import GLOBAL_PACKAGE_HEADER

    try:
        text = path.read_text(encoding="utf-8")
        if GLOBAL_PACKAGE_HEADER not in text.splitlines()[:5]:
            reason = f"no '{GLOBAL_PACKAGE_HEADER}' line"
        else:
            yaml.safe_load(text)
            return []
    except (OSError, UnicodeDecodeError):
        reason = "cannot be read"
    except yaml.YAMLError as error:
        reason = "not valid YAML: " + " ".join(str(error).split())
    return textwrap.wrap(f"UNREADABLE, skipped by every run ({reason}); +recipe={path.stem} says why",
                         _WRAP_AT, break_on_hyphens=False, break_long_words=False)


def _recipe_description(path: Path) -> list[str]:
    """The recipe's whole description: its comment block after the package header, as written.

    Decisions: nothing is cut (the first sentence, cut at 70 characters, hid what a recipe is
    for and what it judges by); the text is re-wrapped under the name, and a labelled part
    (`Criterion:`, `Usually overridden:`) starts a line of its own, as in the file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    paragraphs: list[str] = []
    for line in lines[1:] if lines and lines[0].startswith("# @package") else lines:
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not paragraphs or _LABEL.match(text):
            paragraphs.append(text)
        elif text:
            paragraphs[-1] = f"{paragraphs[-1]} {text}".strip()
    return [line for paragraph in paragraphs if paragraph
            for line in textwrap.wrap(paragraph, _WRAP_AT, break_on_hyphens=False, break_long_words=False)]
