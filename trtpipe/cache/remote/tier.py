"""What the local cache calls: look an entry up on the remote, upload one, and say so in one line.

Decisions:
- A remote that fails (no connection, a refused credential, a missing bucket, a stream cut
  midway) is a miss, never an error: one warning line naming the reason, and the rest of the
  run uses the local cache only (no second line, no second timeout per stage). The run's
  outcome and outputs are those of a run without the remote.
- A remote entry that fails a check (a file missing or not matching its sha256, a record that
  is not a record) is a miss for that stage: one warning line, the stage runs, nothing of the
  entry is used. The tier stays on for the other stages; in write modes this run's upload
  repairs the remote: the refused entry's files are sent again and its record is replaced
  (upload.py).
- `read` never writes, `write` never reads (no lookup, no download), `readwrite` does both.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from trtpipe.cache.remote.advice import advice
from trtpipe.cache.remote.fetch import Fetched, Refused, fetch_entry
from trtpipe.cache.remote.location import parse_remote
from trtpipe.cache.remote.s3_store import RemoteUnavailable, S3Store, check_boto3
from trtpipe.cache.remote.upload import Uploaded, upload_entry
from trtpipe.safe_text import safe_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transfer:
    """A remote hit: how long the download and its checks took, and the bytes it moved."""
    seconds: float
    downloaded: int


def remote_tier(url: str | None, mode: str | None) -> "RemoteTier | None":
    """The run's remote tier (cache.remote, cache.remote_mode), or None without cache.remote.

    Made before any stage runs (runner/pipeline.py), so a missing boto3 is one line and exit 2
    with nothing written; the remote itself is first asked when a stage looks its entry up."""
    return None if url is None else RemoteTier(str(url), str(mode or "readwrite"))


class RemoteTier:
    def __init__(self, url: str, mode: str) -> None:
        """Raises UserError when boto3 is missing (exit 2 before any stage)."""
        self.location = parse_remote(url)
        self.mode = mode
        self.off: str | None = None  # why the remote is no longer used in this run
        self._resend: set[str] = set()  # digests of files found damaged: sent again
        self._refused: set[tuple[str, str]] = set()  # (stage, key) of refused records: replaced
        check_boto3()
        self._store = S3Store(self.location.bucket)  # no request, no boto3 import until a lookup or upload

    @property
    def readable(self) -> bool:
        return self.off is None and self.mode in ("read", "readwrite")

    @property
    def writable(self) -> bool:
        return self.off is None and self.mode in ("write", "readwrite")

    def fetch(self, stage: str, key: str, into: Path, known_files: Mapping[Path, str]) -> Fetched | None:
        """The entry downloaded into `into` (not yet checked: the caller checks it as a local
        entry and calls `refuse` when it fails), or None for a miss."""
        try:
            found = fetch_entry(self._store, self.location, stage, key, into, known_files)
        except RemoteUnavailable as error:
            self._switch_off(str(error), f"looking up {stage}")
            return None
        if isinstance(found, Refused):
            self._warn_refused(stage, key, found.problem, {})
            return None
        return found

    def refuse(self, stage: str, key: str, problem: str, record: dict) -> None:
        """A downloaded entry failed the local checks: a miss, one line; its files are sent again
        and its record replaced by this run's upload."""
        self._warn_refused(stage, key, problem, record)

    def upload(self, stage: str, directory: Path, record: dict) -> Uploaded | None:
        try:
            started = time.perf_counter()
            done = upload_entry(self._store, self.location, directory, record, frozenset(self._resend),
                                replace=(stage, record["key"]) in self._refused)
        except RemoteUnavailable as error:
            self._switch_off(str(error), f"uploading {stage}")
            return None
        except OSError as error:  # the local entry vanished meanwhile (pruned): nothing is published
            log.warning("cache.remote %s: %s entry %s… not uploaded: %s", self.location, stage,
                        record["key"][:12], safe_text(error))
            return None
        log.info("cache.remote %s: %s entry %s… %s (%d bytes sent, %.2f s)", self.location, stage, record["key"][:12],
                 "uploaded" if done.published else "already there (another writer's)", done.sent,
                 time.perf_counter() - started)
        return done

    def _warn_refused(self, stage: str, key: str, problem: str, record: dict) -> None:
        files = record.get("files") if isinstance(record, dict) else None
        self._resend.update(d for d in (files or {}).values() if isinstance(d, str))
        self._refused.add((stage, key))
        log.warning("cache.remote %s: %s entry %s… not used (%s): a miss, the stage runs", self.location, stage,
                    key[:12], safe_text(problem))

    def _switch_off(self, reason: str, doing: str) -> None:
        self.off = reason
        log.warning("cache.remote %s is not usable (%s, %s): the rest of this run uses the local cache only%s",
                    self.location, safe_text(reason), doing, safe_text(advice(reason, self.location.bucket)))
