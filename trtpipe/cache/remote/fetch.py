"""Download one entry from the remote into a temporary folder of the local cache.

Decisions:
- The record is read first (at most `RECORD_LIMIT` bytes) and its file names and digests
  checked (entry_schema.py) before any name is used for a path: a record is data anyone with
  write access to the bucket could have planted.
- A file whose digest is that of a file of the stage's verified inputs (an upgrade_opset model
  equal to its input) is hard-linked from the local entry instead of downloaded, as a local
  build would (cache.link_unchanged_files): bytes not moved, disk not doubled.
- Nothing here decides trust: the caller checks the folder exactly as it checks a local entry
  (every file against its recorded sha256, the material against the key) before publishing it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from trtpipe.cache.entry_schema import listed_files_problem
from trtpipe.cache.remote.location import RemoteLocation
from trtpipe.cache.remote.s3_store import S3Store

ENTRY_FILE = "entry.json"
# A record is a few kB (its material and file digests); a larger object under its name is planted or
# damaged, and is refused without being read into memory whole.
RECORD_LIMIT = 16 << 20


@dataclass(frozen=True)
class Fetched:
    record: dict
    downloaded: int  # bytes moved over the network (the record included)


@dataclass(frozen=True)
class Refused:
    problem: str  # why the remote entry is a miss, in a few words


def fetch_entry(store: S3Store, location: RemoteLocation, stage: str, key: str, into: Path,
                known_files: Mapping[Path, str]) -> Fetched | Refused | None:
    """None: the remote has no record of the key. Raises RemoteUnavailable."""
    data = store.get_bytes(location.record_key(stage, key), RECORD_LIMIT)
    if data is None:
        return None
    if len(data) > RECORD_LIMIT:
        return Refused(f"its record is over {RECORD_LIMIT >> 20} MiB")
    try:
        record = json.loads(data)
    except ValueError as error:
        return Refused(f"its record is not JSON ({error})")
    problem = listed_files_problem(record, stage, key)
    if problem:
        return Refused(f"its record: {problem}")
    local = {digest: Path(path) for path, digest in known_files.items()}
    moved = len(data)
    for name, digest in sorted(record["files"].items()):
        if digest in local and _linked(local[digest], into / name):
            continue
        size = store.download(location.file_key(digest), into / name)
        if size is None:
            return Refused(f"its file {name} (sha256 {digest[:12]}…) is not on the remote")
        moved += size
    (into / ENTRY_FILE).write_bytes(data)
    return Fetched(record, moved)


def _linked(original: Path, target: Path) -> bool:
    try:
        os.link(original, target, follow_symlinks=False)
        return True
    except OSError:  # gone meanwhile, another file system, too many links: download it
        return False
