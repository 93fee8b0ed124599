"""Digests of source files, memoised by (size, mtime, inode), after DVC's state db.

Decision: a source model is hashed once per content change, not once per run: a
cached run of a 2 GB model would otherwise spend seconds re-hashing (and parsing it
for its external data) to learn nothing. The memo records the stat of the model
file and of every external data file the model names (the names cannot change
while the model file's stat is unchanged). Cache entries themselves are still
verified by full digests on every hit: they are what trtpipe vouches for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trtpipe.cache.cache_dir import refuse_linked_file
from trtpipe.cache.files import cache_errors_as_user_errors, write_atomic
from trtpipe.cache.hashing import artifact_digest, external_data_locations
from trtpipe.cache.locks import held

_MEMO_LIMIT = 256
_MEMO_FILE = "source-digests-v2.json"  # v2: large files hash as a chunk tree (hashing.py)


def memoised_digest(path: Path, index_dir: Path) -> str:
    path = Path(path).resolve()
    memo_path = index_dir / _MEMO_FILE
    known = _read(memo_path).get(str(path))
    if _well_formed(known) and known["stamps"] == _stamps(path, known["sidecars"]):
        return known["sha256"]
    sidecars = external_data_locations(path) if path.suffix == ".onnx" else []
    record = {"sidecars": sidecars, "stamps": _stamps(path, sidecars),
              "sha256": artifact_digest(path, locations=sidecars if path.suffix == ".onnx" else None)}
    # An OSError here (full disk, another user's cache, a link loop) is a UserError naming the file.
    refuse_linked_file(index_dir.parent, index_dir / (_MEMO_FILE + ".lock"))
    with held(index_dir / (_MEMO_FILE + ".lock"), 60, purpose="which is updating the source-digest memo",
              announce=False):
        memo = _read(memo_path)
        memo.pop(str(path), None)
        memo[str(path)] = record
        with cache_errors_as_user_errors(memo_path, "source-digest memo"):
            write_atomic(memo_path, json.dumps(dict(list(memo.items())[-_MEMO_LIMIT:])).encode())
    return record["sha256"]


def _stamps(path: Path, sidecars: list[str]) -> list[list[int]] | None:
    try:
        stats = [os.stat(path)] + [os.stat(path.parent / name) for name in sidecars]
    except FileNotFoundError:
        return None
    return [[s.st_size, s.st_mtime_ns, s.st_ino] for s in stats]


def _read(memo_path: Path) -> dict:
    """The memo; a damaged one (not JSON, not an object) is empty: it only costs a re-hash."""
    if memo_path.is_symlink():  # never read through a link (write_atomic replaces it)
        return {}
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _well_formed(record: object) -> bool:
    """A memo record as `memoised_digest` writes it (a damaged one is ignored, never trusted)."""
    return (isinstance(record, dict) and isinstance(record.get("sha256"), str)
            and isinstance(record.get("stamps"), list) and isinstance(record.get("sidecars"), list)
            and all(isinstance(name, str) for name in record["sidecars"]))
