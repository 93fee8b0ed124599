"""A run's artifact that was left in the cache, found from its manifest.

A failed run places no model in its run directory, and `run.artifacts=final` only the last
(docs/cache.md): the manifest still records each output's stage key and sha256, so the file is
`<cache.dir>/entries/<stage>/<key>/<file>`, trusted only when its digest is the recorded one.
Used by `trtpipe-reduce` and by bench/rtx, which compile or cut a failed run's model.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtpipe.cache.hashing import artifact_digest


def artifact_in_recorded_cache(manifest: dict, digest: str) -> Path | None:
    """The cache entry's file of a stage output the manifest records with sha256 `digest`, in the cache the
    run recorded (`config.cache.dir`), checked against the digest; None when there is none."""
    cache_dir = ((manifest.get("config") or {}).get("cache") or {}).get("dir")
    if not isinstance(cache_dir, str):
        return None
    for stage in manifest["stages"]:
        key = stage.get("key")
        kinds = [kind for kind, entry in (stage.get("outputs") or {}).items() if entry.get("sha256") == digest]
        if not kinds or not isinstance(key, str) or not key.isalnum():
            continue
        folder = Path(cache_dir).expanduser() / "entries" / str(stage.get("name")) / key
        try:
            record = json.loads((folder / "entry.json").read_text())
            file = folder / record["outputs"][kinds[0]]["file"]
            if Path(file.name) == Path(record["outputs"][kinds[0]]["file"]) and artifact_digest(file) == digest:
                return file
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
