"""Content-addressed artifact cache.

Layout under the cache root:
  entries/<stage>/<key>/   entry.json + the stage's output files (never modified)
  tmp/<host>-<pid>-<id>/   an entry being built; renamed into entries/ when complete
  locks/<key>.lock         one lock per key: concurrent jobs wait, then hit
  index/<stage>.json       recent key materials, to explain why a stage re-ran

Decisions:
- An entry is published by one atomic rename of a complete directory, so a crash
  leaves at most a stale tmp directory, never a partial entry.
- An entry is trusted only if entry.json parses, names the expected stage and key,
  and every file's sha256 matches; otherwise it is discarded with a warning and rebuilt.
- Locks are `filelock` (flock on POSIX): the kernel releases them when the holder
  dies, so a dead process never blocks others.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from filelock import FileLock, Timeout

from trtpipe.errors import StageFailed
from trtpipe.runner.explain import explain_miss
from trtpipe.runner.files import disk_errors_as_user_errors, ensure_writable_dir, write_atomic
from trtpipe.runner.hashing import artifact_digest, canonical_json, sha256_bytes, sha256_file

log = logging.getLogger(__name__)

ENTRY_FILE = "entry.json"
_INDEX_LENGTH = 32
_STALE_TMP_SECONDS = 24 * 3600


@dataclass(frozen=True)
class CacheEntry:
    directory: Path
    record: dict

    @property
    def key(self) -> str:
        return self.record["key"]

    def output_path(self, kind: str) -> Path:
        return self.directory / self.record["outputs"][kind]["file"]

    def output_digest(self, kind: str) -> str:
        return self.record["outputs"][kind]["sha256"]


@dataclass(frozen=True)
class CacheResult:
    entry: CacheEntry
    status: str  # "cached" or "ran"
    reason: str | None  # why it ran


# What a stage computation returns: {"outputs": {kind: file name}, plus any JSON fields}.
Compute = Callable[[Path], dict]


def cache_key(material: dict) -> str:
    return sha256_bytes(canonical_json(material))


class ArtifactCache:
    def __init__(self, root: Path, lock_timeout: float = 7200.0) -> None:
        fix = "set cache.dir (or TRTPIPE_CACHE) to a writable directory"
        self.root = ensure_writable_dir(Path(root), "cache directory", fix)
        self.lock_timeout = lock_timeout
        for sub in ("entries", "tmp", "locks", "index"):
            (self.root / sub).mkdir(exist_ok=True)
        self._remove_stale_tmp()

    def get_or_compute(self, stage: str, material: dict, compute: Compute,
                       required: tuple[str, ...] = (), known_files: Mapping[Path, str] | None = None) -> CacheResult:
        """`required`: output kinds an entry must have to be trusted. `known_files`: files of
        verified entries (the stage's inputs) and their digests; see `_build`."""
        key = cache_key(material)
        entry, problem = self._load(stage, key, required)
        if entry is not None:
            return CacheResult(entry, "cached", None)
        with self._lock(stage, key):
            entry, problem = self._load(stage, key, required)  # another process may have finished it
            if entry is not None:
                return CacheResult(entry, "cached", None)
            if problem:
                log.warning("cache entry %s/%s… is invalid (%s): discarded, rebuilding", stage, key[:12], problem)
                self._discard(self._entry_dir(stage, key))
            reason = problem or explain_miss(self._previous_materials(stage), material)
            entry = self._build(stage, key, material, compute, known_files or {})
            self._remember(stage, key, material)
            return CacheResult(entry, "ran", reason)

    def _entry_dir(self, stage: str, key: str) -> Path:
        return self.root / "entries" / stage / key

    def _load(self, stage: str, key: str, required: tuple[str, ...] = ()) -> tuple[CacheEntry | None, str | None]:
        directory = self._entry_dir(stage, key)
        if not directory.exists():
            return None, None
        try:
            record = json.loads((directory / ENTRY_FILE).read_text())
        except (OSError, ValueError) as error:
            return None, f"{ENTRY_FILE} unreadable: {error}"
        if record.get("stage") != stage or record.get("key") != key:
            return None, f"{ENTRY_FILE} names another stage or key"
        for name, digest in record.get("files", {}).items():
            path = directory / name
            if not path.is_file():
                return None, f"{name} is missing"
            if sha256_file(path) != digest:
                return None, f"{name} does not match its recorded sha256"
        outputs = record.get("outputs", {})
        if any(value.get("file") not in record.get("files", {}) for value in outputs.values()):
            return None, "an output is not among the recorded files"
        missing = [kind for kind in required if kind not in outputs]
        if missing:
            return None, f"it lacks the output(s) {missing} the stage declares"
        return CacheEntry(directory, record), None

    def _build(self, stage: str, key: str, material: dict, compute: Compute,
               known_files: Mapping[Path, str]) -> CacheEntry:
        tmp = self.root / "tmp" / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            with disk_errors_as_user_errors(self.root):
                tmp.mkdir(parents=True)
                result = dict(compute(tmp))
                outputs = result.pop("outputs")
                # Decision: an output that is a hard link to a file of a verified input entry (an
                # untouched weights file, onnx_io.save_model(link_data_under=)) is that file: its
                # digest is on record. Same inode, same bytes; entries are never modified.
                linked = _digests_by_inode(known_files)
                files = {p.name: linked.get(_inode(p)) or sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
                record = {
                    "stage": stage,
                    "key": key,
                    "material": material,
                    "files": files,
                    "outputs": {
                        kind: {"file": name, "sha256": artifact_digest(tmp / name, files)} for kind, name in outputs.items()
                    },
                    **result,
                }
                write_atomic(tmp / ENTRY_FILE, json.dumps(record, indent=2, sort_keys=True).encode())
                final = self._entry_dir(stage, key)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(final, record)

    def _discard(self, directory: Path) -> None:
        # Rename first so that no reader can see a half-deleted entry.
        trash = self.root / "tmp" / f"discarded-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def _lock(self, stage: str, key: str):
        lock = FileLock(str(self.root / "locks" / f"{key}.lock"))
        # filelock's acquire returns a context manager that releases the lock on exit.
        try:
            return lock.acquire(timeout=0.05)
        except Timeout:
            log.info("%s: waiting for another process computing the same entry (%s…)", stage, key[:12])
            try:
                return lock.acquire(timeout=self.lock_timeout)
            except Timeout as error:
                raise StageFailed(
                    f"{stage}: waited {self.lock_timeout:.0f} s for the lock {lock.lock_file}; "
                    "if no other trtpipe job is running, delete that file"
                ) from error

    def _index_path(self, stage: str) -> Path:
        return self.root / "index" / f"{stage}.json"

    def _previous_materials(self, stage: str) -> list[dict]:
        try:
            return [item["material"] for item in json.loads(self._index_path(stage).read_text())]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def _remember(self, stage: str, key: str, material: dict) -> None:
        with FileLock(str(self.root / "locks" / f"index-{stage}.lock"), timeout=60):
            try:
                items = json.loads(self._index_path(stage).read_text())
            except (OSError, ValueError):
                items = []
            items = [{"key": key, "material": material}] + [i for i in items if i.get("key") != key]
            write_atomic(self._index_path(stage), json.dumps(items[:_INDEX_LENGTH], sort_keys=True).encode())

    def _remove_stale_tmp(self) -> None:
        """Remove tmp directories of dead local processes, and any older than a day."""
        host = socket.gethostname()
        now = time.time()
        for path in (self.root / "tmp").iterdir():
            owner_host, _, rest = path.name.rpartition("-")[0].rpartition("-")
            pid = rest if rest.isdigit() else ""
            dead_local = owner_host == host and pid and not _pid_alive(int(pid))
            try:
                old = now - path.stat().st_mtime > _STALE_TMP_SECONDS
            except FileNotFoundError:
                continue
            if dead_local or old or path.name.startswith("discarded-"):
                log.debug("removing stale cache temporary %s", path)
                shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _inode(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def _digests_by_inode(known_files: Mapping[Path, str]) -> dict[tuple[int, int], str]:
    digests = {}
    for path, digest in known_files.items():
        try:
            digests[_inode(Path(path))] = digest
        except OSError:  # gone meanwhile: then nothing links to it
            continue
    return digests
