"""Digests of source files, memoised while the memo can show the bytes are unchanged.

Decision: a source model is hashed once per content change, not once per run: a
cached run of a 2 GB model would otherwise spend seconds re-hashing (and parsing it
for its external data) to learn nothing. The memo records the stat of the model
file and of every external data file the model names (the names cannot change
while the model file's bytes are unchanged). Cache entries themselves are still
verified by full digests on every hit: they are what trtpipe vouches for.

Decision (issue 32, item 4): the memo's answer is served only where the file cannot have
been rewritten since it was hashed. Size, mtime and inode alone were not that:
`cp --preserve=timestamps B model.onnx` keeps all three (cp writes into the same inode
and sets the mtime back), and model A's digest, cached artifacts and sha256 were given
to B. The memo is served when, for the model and each of its external data files:
- size, mtime, ctime, inode and device are those recorded. ctime is set by the kernel on
  every write, `utime` and rename, and no user can set it (as git's index relies on);
- the file's ctime was at least `_SETTLED_NS` older than the moment the stamps were
  taken, else the record is "racy" (git's word): a rewrite within the same tick of the
  file system's clock would keep every stamp. Such a record is written but never
  served; the next run re-hashes and records it settled;
- a SHA-256 of `_SAMPLE` bytes at the head, the middle and the tail of each file equals
  the recorded one: an edit the stamps cannot see (a clock set back, a file system that
  fakes ctime) must also miss all three windows. On a 300 MB file (warm page cache, the
  2-core machine under a load of 4) the stat and the sample took 0.17 ms, a memo hit
  0.35 ms, its full hash 0.40 s: the memo keeps its purpose.
A record of an earlier shape (no ctime, no sample) is not well formed: a re-hash.

Decision: a re-hash that confirms the digest the memo holds (a racy record, a `chmod` or
`chown` that moved the ctime) only refreshes its stamps, so where the memo cannot be written
(a reader of another user's cache) the run goes on: it costs the next run a hash. A new or
changed digest that cannot be remembered is exit 2 in one line, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from trtpipe.cache.cache_dir import refuse_linked_file
from trtpipe.cache.files import cache_errors_as_user_errors, write_atomic
from trtpipe.cache.hashing import artifact_digest, external_data_locations
from trtpipe.cache.locks import held
from trtpipe.errors import UserError

_MEMO_LIMIT = 256
_MEMO_FILE = "source-digests-v2.json"  # v2: large files hash as a chunk tree (hashing.py)
_SAMPLE = 64 << 10  # bytes read at each of the head, middle and tail of every file
# Coarser than the timestamps of any file system Linux serves ctime from (ext4, xfs, btrfs:
# nanoseconds from a clock that ticks every 1-10 ms; 1 s on some NFS servers and old ext3).
_SETTLED_NS = 2_000_000_000


def memoised_digest(path: Path, index_dir: Path) -> str:
    path = Path(path).resolve()
    memo_path = index_dir / _MEMO_FILE
    known = _read(memo_path).get(str(path))
    if (_well_formed(known) and _settled(known) and known["stamps"] == _stamps(path, known["sidecars"])
            and known["sample"] == _sample(path, known["sidecars"])):
        return known["sha256"]
    sidecars = external_data_locations(path) if path.suffix == ".onnx" else []
    taken_ns, stamps = time.time_ns(), _stamps(path, sidecars)
    sample = _sample(path, sidecars)
    record = {"sidecars": sidecars, "stamps": stamps, "sample": sample, "taken_ns": taken_ns,
              "sha256": artifact_digest(path, locations=sidecars if path.suffix == ".onnx" else None)}
    if stamps is None or _stamps(path, sidecars) != stamps:  # changed while hashed: nothing to remember
        return record["sha256"]
    try:
        _remember(index_dir, str(path), record)
    except UserError:
        if not (_well_formed(known) and (known["sha256"], known["sidecars"]) == (record["sha256"], sidecars)):
            raise  # a digest the memo does not hold yet
    return record["sha256"]


def _remember(index_dir: Path, name: str, record: dict) -> None:
    """Write `record` into the memo. An OSError (full disk, another user's cache, a link loop)
    is a UserError naming the file."""
    memo_path = index_dir / _MEMO_FILE
    refuse_linked_file(index_dir.parent, index_dir / (_MEMO_FILE + ".lock"))
    with held(index_dir / (_MEMO_FILE + ".lock"), 60, purpose="which is updating the source-digest memo",
              announce=False):
        memo = _read(memo_path)
        memo.pop(name, None)
        memo[name] = record
        with cache_errors_as_user_errors(memo_path, "source-digest memo"):
            write_atomic(memo_path, json.dumps(dict(list(memo.items())[-_MEMO_LIMIT:])).encode())


def _stamps(path: Path, sidecars: list[str]) -> list[list[int]] | None:
    try:
        stats = [os.stat(path)] + [os.stat(path.parent / name) for name in sidecars]
    except FileNotFoundError:
        return None
    return [[s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino, s.st_dev] for s in stats]


def _sample(path: Path, sidecars: list[str]) -> str | None:
    """SHA-256 of `_SAMPLE` bytes at the head, the middle and the tail of each file."""
    digest = hashlib.sha256()
    try:
        for file in [path] + [path.parent / name for name in sidecars]:
            with open(file, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                for offset in (0, max(0, size // 2 - _SAMPLE // 2), max(0, size - _SAMPLE)):
                    digest.update(os.pread(handle.fileno(), _SAMPLE, offset))
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def _settled(record: dict) -> bool:
    """Every file's ctime was `_SETTLED_NS` older than the stamps when they were taken."""
    return all(stamp[2] <= record["taken_ns"] - _SETTLED_NS for stamp in record["stamps"])


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
            and isinstance(record.get("sample"), str) and isinstance(record.get("taken_ns"), int)
            and isinstance(record.get("stamps"), list) and isinstance(record.get("sidecars"), list)
            and all(isinstance(name, str) for name in record["sidecars"])
            and all(isinstance(stamp, list) and len(stamp) == 5 and all(isinstance(v, int) for v in stamp)
                    for stamp in record["stamps"]))
