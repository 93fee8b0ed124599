"""The composed config of a single run, remembered: a repeated command skips Hydra's composition.

Decision (issue 33, item 6): composing trtpipe's config (registering the schemas and recipes in
the ConfigStore, then Hydra building the defaults tree and merging ~25 structured nodes) took
~0.7 s of a ~1.4 s fully cached run. A single run (single_run.py) looks the composition up here
first; the entry is Hydra's composed DictConfig exactly as `Hydra.compose_config` returned it
(pickled: the schema types, flags and the `hydra` node survive, so `.hydra/*.yaml`, the manifest
and the console are those of a composition). It is used only when nothing that can change the
composition has changed. The key holds:
- the text of every file under `conf/` and of every recipe file (shipped and TRTPIPE_RECIPES',
  each with the name it registers under), so an edit, a new or a removed file is a miss;
- the command line's overrides, in order;
- the environment the composition reads: TRTPIPE_RECIPES, and every variable an `oc.env` (or
  the old `env`) interpolation names in those files or in the overrides; the variables Hydra
  copies at composition (`hydra.job.env_copy`) are stored with the entry and must be unchanged;
- the start directory (`hydra.runtime.cwd`) and where `conf/` is (`hydra.runtime.config_sources`);
- the versions of trtpipe, Hydra, OmegaConf and Python, the source of trtpipe's config code
  (trtpipe/config/*.py: the schemas, the store, the checks), of this module and of single_run.py
  (an edited checkout keeps its version number), and of the installed Hydra plugins
  (hydra_plugins/: a launcher plugin registers configs in the ConfigStore).
Not written (so never used) when the composition read something the key does not hold: a config
source other than `conf/`, Hydra's own package and the ConfigStore (`hydra.searchpath`, a search
path plugin), or a recipe file register_configs skipped (its warning must be printed each run).

Decision: the entries live in the cache's `index/compose-<uid>/` (the cache TRTPIPE_CACHE or the
user cache directory names; `cache.dir` is known only after composing), a folder of the user's own
(0700), each file 0600, at most `_KEEP` of them (least recently used removed). Nothing is written
where no trtpipe cache exists yet (the first run makes one) or the folder is not the user's alone.
An entry is loaded only from a file and folder owned by this user and writable by nobody else
(pickle runs code: another user's file is never read), and only when the key stored inside it is
the one asked for (a renamed file is a miss). Any problem reading or writing is a miss, never an
error: the run composes as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import stat
import sys
from pathlib import Path

FORMAT = 1
_KEEP = 32  # entries per user: one per distinct command line and start directory
# An interpolation that reads the environment at resolve time: `${oc.env:NAME}`, `${env:NAME}`.
_ENV_READ = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:\s*([A-Za-z_][A-Za-z0-9_]*)")
_PACKAGE = Path(__file__).resolve().parents[1]  # trtpipe/


def memo_key(config_dir: Path, overrides: list[str]) -> str:
    """sha256 of everything the composition of `overrides` on `config_dir` reads (module doc)."""
    import hydra
    import omegaconf

    from trtpipe import __version__
    from trtpipe.config.locate import USER_RECIPES_ENV, recipe_files

    texts: dict[str, str] = {}
    for path in sorted(Path(config_dir).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:  # a wheel's conf/ is a package
            texts[f"conf/{path.relative_to(config_dir).as_posix()}"] = _text(path)
    for name, path in recipe_files().items():
        texts[f"recipe/{name}@{path}"] = _text(path)
    code = {str(path.relative_to(_PACKAGE)): _text(path)
            for path in [*sorted((_PACKAGE / "config").glob("*.py")), _PACKAGE / "memo" / "compose.py",
                         _PACKAGE / "single_run.py"]}
    read = sorted({name for text in [*texts.values(), *overrides] for name in _ENV_READ.findall(text)}
                  | {USER_RECIPES_ENV})
    material = {
        "format": FORMAT,
        "files": {name: _digest(text) for name, text in texts.items()},
        "overrides": list(overrides),
        "environment": {name: os.environ.get(name) for name in read},
        "cwd": os.getcwd(),
        "config_dir": str(config_dir),
        "versions": {"trtpipe": __version__, "hydra": hydra.__version__, "omegaconf": omegaconf.__version__,
                     "python": sys.version},
        "code": {name: _digest(text) for name, text in code.items()},
        "hydra_plugins": _plugin_digests(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def load(key: str):
    """The composed config stored under `key`, or None (no entry, not this user's, or stale)."""
    folder = _folder()
    if folder is None:
        return None
    path = folder / f"{key}.pickle"
    try:
        with open(path, "rb") as handle:
            if not (_private(os.fstat(handle.fileno())) and _private(os.stat(folder))):
                return None
            entry = pickle.load(handle)
        if not (isinstance(entry, dict) and entry.get("key") == key and entry.get("format") == FORMAT):
            return None
        if any(os.environ.get(name) != value for name, value in entry["env_copy"].items()):
            return None
        os.utime(path)  # recently used: kept by _prune
        return entry["config"]
    except Exception:  # missing, unreadable, truncated, another format: compose instead
        return None


def save(key: str, cfg, config_dir: Path) -> None:
    """Remember `cfg` (as composed, before the run changes it) under `key`, where that is safe."""
    from omegaconf import OmegaConf

    sources = {(source.schema, source.provider, source.path) for source in cfg.hydra.runtime.config_sources}
    known = {("file", "main", str(config_dir)), ("pkg", "hydra", "hydra.conf"), ("structured", "schema", "")}
    if sources - known or cfg.hydra.searchpath:
        return  # a source the key does not hold
    try:
        folder = _folder(create=True)
        if folder is None:
            return
        env_copy = {name: os.environ.get(name) for name in OmegaConf.to_container(cfg.hydra.job.env_copy)}
        data = pickle.dumps({"format": FORMAT, "key": key, "env_copy": env_copy, "config": cfg},
                            protocol=pickle.HIGHEST_PROTOCOL)
        _write_private(folder / f"{key}.pickle", data)
        _prune(folder)
    except Exception:  # a full disk, a read-only cache, an unpicklable value: the run goes on
        return


def _folder(create: bool = False) -> Path | None:
    """index/compose-<uid>/ of the default cache, when that cache exists and the folder is private."""
    from trtpipe.cache.cache_dir import CACHE_MARKER
    from trtpipe.cache.cache_home import default_cache_dir

    root = default_cache_dir()
    index = root / "index"
    folder = index / f"compose-{os.getuid()}"
    if not (root / CACHE_MARKER).is_file() or index.is_symlink() or not index.is_dir():
        return None
    if create and not folder.exists():
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        if folder.is_symlink() or not _private(os.stat(folder)):
            return None
    except OSError:
        return None
    return folder


def _private(status: os.stat_result) -> bool:
    """Owned by this user and writable by no one else."""
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _write_private(path: Path, data: bytes) -> None:
    """A 0600 file written whole under a temporary name, then renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in entries[_KEEP:]:
        path.unlink(missing_ok=True)


def _plugin_digests() -> dict[str, str]:
    """Each file of the installed `hydra_plugins` packages -> sha256 (not imported here)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("hydra_plugins")
    except (ImportError, ValueError):
        return {}
    found = {}
    for location in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(location).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yaml", ".yml") and "__pycache__" not in path.parts:
                found[str(path)] = _digest(_text(path))
    return found


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()
