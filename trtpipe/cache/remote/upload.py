"""Upload one local entry: its files first, by content, then its record with a conditional write.

Decisions:
- Files first, record last: a reader finds a record only once every file it names is a whole
  object. A writer stopped midway leaves files no record names (a later upload of the same
  bytes reuses them), never a record without its files.
- A file already on the remote with the same size is not sent again (content-addressed: same
  name, same bytes), unless this run found that digest's object corrupt (`resend`): then the
  good bytes replace it. Size alone is a cheap check; a reader verifies every byte anyway.
- The record is written only if the key holds none (`If-None-Match: *`, s3_store.py): of two
  hosts racing on one key, the first complete record stays and the other keeps its entry local.
- Except over a record this run refused (`replace`: a file missing or not its digest's, a
  record that is not one): the conditional write would keep it forever, a miss for every host,
  since a rebuild of a stage that is not byte-reproducible (an engine) never brings back its
  files. It is replaced, unconditionally: if another host replaced it meanwhile, both records
  are complete (each one's files went up before it) and the later one stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.cache.remote.location import RemoteLocation
from trtpipe.cache.remote.s3_store import S3Store

ENTRY_FILE = "entry.json"


@dataclass(frozen=True)
class Uploaded:
    sent: int  # bytes of files and record sent
    published: bool  # False: another writer's record of the key was there first


def upload_entry(store: S3Store, location: RemoteLocation, directory: Path, record: dict,
                 resend: frozenset[str] = frozenset(), replace: bool = False) -> Uploaded:
    """Raises RemoteUnavailable (nothing of the record is then written)."""
    sent = 0
    for name, digest in sorted(record["files"].items()):
        path = directory / name
        size = path.stat().st_size
        if digest not in resend and store.size(location.file_key(digest)) == size:
            continue
        store.upload(location.file_key(digest), path)
        sent += size
    data = (directory / ENTRY_FILE).read_bytes()
    where = location.record_key(record["stage"], record["key"])
    if replace:
        store.put(where, data)
        published = True
    else:
        published = store.put_if_absent(where, data)
    return Uploaded(sent + (len(data) if published else 0), published)
