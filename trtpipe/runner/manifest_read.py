"""Read a recorded `manifest.json` back as data: checked shape, no interpolation.

A manifest is input from outside (it may have been edited, truncated or planted), so
`trtpipe-verify` checks every field it uses before using it, and every problem is a
one-line UserError (exit 2), never a traceback.

Decisions:
- The recorded config is data. OmegaConf would resolve `${oc.env:SECRET}` (or any
  resolver) the moment a stage reads the value and then print it, hash it and write
  it into the rebuild's manifest and log; `as_literal_config` escapes every `${` so
  each value stays the literal string that was recorded, and proves it (the escaped
  config resolves back to exactly the recorded data) before anything runs.
- Relative paths in the recorded config (model, data, cache) were resolved by the
  run against the directory it started in. Manifests record that directory as
  `start_dir` (absolute); for older manifests without it, `recorded_start_dir` infers
  it from the recorded model path when it can, and otherwise falls back to the
  current directory (the old behaviour), saying so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from trtpipe.errors import UserError
from trtpipe.runner.manifest import MANIFEST_FORMAT, MANIFEST_NAME

# What the runner writes as a stage's status (runner/manifest.py StageRecord).
STATUSES = ("ran", "cached", "deferred", "skipped", "failed", "interrupted")
_FIX = "give the manifest.json written by a trtpipe run (or its run directory)"
_INTERPOLATION = re.compile(r"(\\*)\$\{")


def read_manifest(path: Path) -> dict:
    """The manifest at `path` (a run directory or the file), its shape checked."""
    path = path / MANIFEST_NAME if path.is_dir() else path
    try:
        text = path.read_bytes().decode("utf-8")
        manifest = json.loads(text)
    except (OSError, ValueError, RecursionError) as error:
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise UserError(f"cannot read manifest {path} ({reason})", _FIX) from None
    problem = _shape_problem(manifest)
    if problem:
        raise UserError(f"{path} is not a trtpipe manifest ({problem})", _FIX)
    return manifest


def _shape_problem(manifest) -> str | None:
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not an object"
    missing = [key for key in ("config", "stages", "source") if key not in manifest]
    if missing:
        return f"missing {missing}"
    fmt = manifest.get("format", MANIFEST_FORMAT)
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt > MANIFEST_FORMAT:
        return f"format {_short(fmt)}; this trtpipe reads format {MANIFEST_FORMAT} and older"
    checks = [
        ("config", dict), ("source", dict), ("stages", list),
        ("overrides", list), ("tools", dict), ("start_dir", str),
    ]
    for key, kind in checks:
        if key in manifest and not isinstance(manifest[key], kind) and not (key == "start_dir" and manifest[key] is None):
            return f"{key} is a {_kind(manifest[key])}, not a {kind.__name__}"
    if not all(isinstance(o, str) for o in manifest.get("overrides", [])):
        return "overrides holds a value that is not a string"
    start = manifest.get("start_dir")
    if start is not None and not Path(start).is_absolute():
        return f"start_dir {_short(start)} is not an absolute path"
    return _source_problem(manifest["source"]) or _stages_problem(manifest["stages"])


def _source_problem(source: dict) -> str | None:
    builtin = source.get("builtin")
    if builtin is not None and not isinstance(builtin, str):
        return f"source.builtin is a {_kind(builtin)}, not a string or null"
    for key in ("path", "sha256"):
        if not isinstance(source.get(key), str) or not source[key]:
            return f"source.{key} is {'missing' if key not in source else 'a ' + _kind(source[key])}, not a string"
    return None


def _stages_problem(stages: list) -> str | None:
    seen = set()
    for index, stage in enumerate(stages):
        where = f"stages[{index}]"
        if not isinstance(stage, dict):
            return f"{where} is a {_kind(stage)}, not an object"
        name = stage.get("name")
        if not isinstance(name, str) or not name:
            return f"{where} has no name"
        if name in seen:
            return f"{where} repeats the stage name {_short(name)}"
        seen.add(name)
        for key, kind in (("key", str), ("material", dict), ("outputs", dict)):
            value = stage.get(key)
            if value is not None and not isinstance(value, kind):
                return f"{where}.{key} is a {_kind(value)}, not a {kind.__name__} or null"
        if stage.get("status") not in STATUSES:
            return f"{where}.status is {_short(stage.get('status'))}, not one of {', '.join(STATUSES)}"
        for kind, output in (stage.get("outputs") or {}).items():
            if not isinstance(output, dict) or not isinstance(output.get("sha256"), str):
                return f"{where}.outputs.{_short(kind)} has no sha256 string"
            if not isinstance(output.get("path"), str) or not output["path"]:
                return f"{where}.outputs.{_short(kind)} has no path string"
    return None


def as_literal_config(config: dict):
    """A DictConfig whose every value is the recorded literal (no interpolation, no resolver)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    escaped = literal(config)
    try:
        cfg = OmegaConf.create(escaped)
        same = OmegaConf.to_container(cfg, resolve=True) == config
    except (OmegaConfBaseException, ValueError, TypeError, RecursionError):
        same = False
    if not same:  # never show the value: resolving it may have produced a secret
        raise UserError("the manifest's config cannot be read as plain data", _FIX)
    return cfg


def literal(value):
    """`${` -> `\\${` with the backslashes before it doubled, so OmegaConf keeps the text."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, dict):
        return {key: literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [literal(item) for item in value]
    return value


def recorded_start_dir(manifest: dict) -> tuple[Path, str | None]:
    """The directory the recorded run resolved relative paths against, and a note when guessed."""
    if manifest.get("start_dir"):
        return Path(manifest["start_dir"]), None
    model = manifest["config"].get("model") if isinstance(manifest["config"].get("model"), dict) else {}
    recorded, source = model.get("path"), Path(manifest["source"]["path"])
    if isinstance(recorded, str) and recorded and not Path(recorded).is_absolute() and source.is_absolute():
        parts = Path(recorded).parts
        if ".." not in parts and source.parts[-len(parts):] == parts:
            return Path(*source.parts[: -len(parts)]), None
    return Path.cwd(), "the manifest records no start directory: relative paths resolved against the current directory"


def _kind(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__)


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return repr(text if len(text) <= 60 else text[:57] + "...")
