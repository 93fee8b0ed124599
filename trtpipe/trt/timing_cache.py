"""The shared tactic timing cache: one file per GPU/driver/CUDA/TensorRT, under trtpipe's cache dir.

Decisions:
- TensorRT's timing cache "is specific to the targeted device, CUDA, TensorRT
  versions" (TensorRT developer guide, "Optimizing Builder Performance / Timing
  Cache"), so its file name carries a key of exactly those facts: a cache is never
  fed to another GPU or TensorRT version.
- Loading and merging are Polygraphy's: `CreateConfig(load_timing_cache=path)` reads
  it under `util.LockFile`, and `EngineBytesFromNetwork(save_timing_cache=path)`
  re-reads it under the same lock, `combine`s it with the new timings
  (`ignore_mismatch=True`) and writes it back (polygraphy/backend/trt/loader.py). So
  parallel builds share one file and never lose each other's timings.
- A small JSON sidecar records the facts, so a person can tell what a file is for.
  It is written under a `filelock` lock and atomically.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from trtpipe.cache.cache_dir import real_folder
from trtpipe.cache.files import write_atomic
from trtpipe.cache.hashing import canonical_json, sha256_bytes

TIMING_CACHE_DIR = "timing_cache"
KEY_FORMAT = 1


@dataclass(frozen=True)
class TimingCacheFile:
    path: Path
    key: str
    facts: Mapping[str, str | None]


def timing_cache_key(facts: Mapping[str, str | None]) -> str:
    return sha256_bytes(canonical_json({"format": KEY_FORMAT, "facts": dict(facts)}))[:16]


def timing_cache_name(facts: Mapping[str, str | None]) -> str:
    """`<gpu>-sm<cc>-trt<version>-<key>.cache`: readable, and unique per set of facts."""
    gpu = _slug(facts.get("gpu_name") or "unknown-gpu")
    capability = (facts.get("compute_capability") or "unknown").replace(".", "")
    tensorrt = facts.get("tensorrt") or "unknown"
    return f"{gpu}-sm{capability}-trt{tensorrt}-{timing_cache_key(facts)}.cache"


def timing_cache_file(cache_dir: Path, facts: Mapping[str, str | None]) -> TimingCacheFile:
    """The file for these facts (created empty-handed: TensorRT starts from an empty cache)."""
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    directory = real_folder(Path(cache_dir), TIMING_CACHE_DIR)  # never written through a link
    path = directory / timing_cache_name(facts)
    sidecar = path.with_suffix(".json")
    with FileLock(str(path) + ".trtpipe.lock", timeout=60):
        if not sidecar.exists():
            write_atomic(sidecar, json.dumps({"key": timing_cache_key(facts), "facts": dict(facts)},
                                             indent=2, sort_keys=True).encode() + b"\n")
    return TimingCacheFile(path=path, key=timing_cache_key(facts), facts=dict(facts))


def cache_dir_from(config: Mapping) -> Path:
    """trtpipe's cache directory as the runner passes it (`cache_dir`), else as configured by default."""
    from trtpipe.cache.cache_home import default_cache_dir

    value = config.get("cache_dir") or default_cache_dir()
    return Path(value).expanduser().absolute()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"
