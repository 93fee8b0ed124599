"""Where the artifact cache lives by default.

Decisions:
- Default: in the user's cache directory, `$XDG_CACHE_HOME/trtpipe/artifacts`, else
  `~/.cache/trtpipe/artifacts` (as pip, ccache and Bazel do). A subfolder, not
  ~/.cache/trtpipe itself: that folder also holds the benchmarks' downloads
  (bench/wild/wild_models.py `wild/`, bench/corpus/corpus_data.py `onnx-*-backend-data/`), and the
  cache-safety rule rightly refuses a non-empty folder that is not a trtpipe cache. A laptop user gets cache hits from every working
  directory (the old default, `outputs/cache` under the current directory, started
  every new directory cold); a CI job gets one cache per runner user that the CI's own
  cache step can save and restore (`~/.cache/trtpipe/artifacts`), or points `TRTPIPE_CACHE` at
  its workspace. Per the XDG spec an empty or relative `XDG_CACHE_HOME` is ignored.
- Overrides, strongest first: `cache.dir=PATH` on the command line (or in a recipe),
  then the environment variable `TRTPIPE_CACHE` (one setting for every run of a CI job
  or a cluster), then the default above. An empty `TRTPIPE_CACHE` counts as unset; a
  relative one is taken from the directory trtpipe starts in and recorded absolute. The
  command line makes it absolute once, before Hydra runs (`pin_cache_env`): a job with
  `hydra.job.chdir=true` resolves the config in its own run directory, and joblib or submitit
  workers inherit the environment, so resolving it there gave every job a cold cache of its own.
- The config holds `${trtpipe.cache_home:}` (resolver registered with the schemas), so
  `--cfg job` shows where the value comes from and the manifest records the resolved
  absolute path (`trtpipe-verify --use-cache` finds the same cache).
- A cache that an earlier version wrote into `outputs/cache` of the start directory is
  not used silently (the location must not depend on the current directory again): the
  run says once where the cache is now and how to keep using the old one.
- The cache-safety rules (cache/cache_dir.py) are the same for the default: a missing
  ~/.cache/trtpipe/artifacts is created and marked; an existing folder there that is not a trtpipe
  cache is refused, never cleaned.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("trtpipe")

CACHE_ENV = "TRTPIPE_CACHE"
ARTIFACTS = "artifacts"  # the cache's folder inside the user's trtpipe cache folder
RESOLVER = "trtpipe.cache_home"
# The old default, relative to the start directory (versions before the user cache directory).
OLD_DEFAULT = Path("outputs") / "cache"


def default_cache_dir() -> Path:
    """The cache directory when `cache.dir` is not set: TRTPIPE_CACHE, else the user cache dir."""
    explicit = os.environ.get(CACHE_ENV, "")
    if explicit:  # a relative path is taken from the current (start) directory, recorded absolute
        return Path(os.path.abspath(Path(explicit).expanduser()))
    return user_cache_dir()


def pin_cache_env(start_dir: Path) -> None:
    """A relative TRTPIPE_CACHE made absolute from `start_dir`, in this process's environment
    (inherited by the jobs it launches)."""
    explicit = os.environ.get(CACHE_ENV, "")
    if explicit and not Path(explicit).expanduser().is_absolute():
        os.environ[CACHE_ENV] = os.path.abspath(Path(start_dir) / Path(explicit).expanduser())


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/trtpipe/artifacts`, else `~/.cache/trtpipe/artifacts`."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path("~/.cache").expanduser()
    return base / "trtpipe" / ARTIFACTS


def default_cache_dir_text() -> str:
    """For `--help`: the directory and where it came from."""
    source = f"from {CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the user cache directory"
    return f"{default_cache_dir()} ({source})"


def register_cache_resolver() -> None:
    """`${trtpipe.cache_home:}` -> default_cache_dir() as a string (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, lambda: str(default_cache_dir()))


def note_old_cache(start_dir: Path, cache_root: Path) -> None:
    """One line when the start directory holds a cache of the old default that is not the one in use."""
    from trtpipe.cache.cache_dir import is_trtpipe_cache

    old = Path(start_dir) / OLD_DEFAULT
    try:
        # Only a folder trtpipe would use as its cache (claim_cache_dir's test) is named, and `rm -r`
        # suggested: a bare `entries/` beside other files may be anybody's.
        if not is_trtpipe_cache(old) or old.resolve() == Path(cache_root).resolve():
            return
    except OSError:
        return
    log.info("trtpipe: note: the cache is now %s; %s (the old default) is no longer used "
             "(cache.dir=%s uses it; rm -r %s frees its space)", cache_root, old, OLD_DEFAULT, old)
