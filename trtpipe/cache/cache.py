"""Content-addressed artifact cache.

Layout under the cache root:
  entries/<stage>/<key>/   entry.json + the stage's output files (never modified)
  TRTPIPE_CACHE.json       marks the folder as trtpipe's cache (cache_dir.py)
  tmp/<id>/entry/          an entry being built; renamed into entries/ when complete
  tmp/<id>/TRTPIPE_TMP     marks the temporary as trtpipe's; its writer holds an flock on it
  locks/<key>.lock         one lock per key: concurrent jobs wait, then hit
  index/<stage>.json       recent key materials (and their run's source model), to explain why a stage re-ran
  An entry's directory mtime is its last use (holds.py); trtpipe-cache and cache.max_size
  delete least recently used entries first (manage.py).

Decisions:
- An entry is published by one atomic rename of a complete directory, so a crash
  leaves at most a stale tmp directory, never a partial entry.
- An entry is trusted only if entry.json parses, passes the record schema
  (entry_schema.py: plain file names, field types, the expected stage and key), and
  every file's sha256 matches; otherwise it is discarded with a warning and rebuilt.
- Only marked temporaries whose writer's lock is free are ever deleted (cache_dir.py).
- Locks are flocks (locks.py): the kernel releases them when the holder dies, so a dead
  process never blocks others, and a wait that times out means a live holder.
- An OSError on the bookkeeping (marker, locks, miss index) is a UserError naming the file
  (files.cache_errors_as_user_errors): full disk, no permission, a link loop.
- A remote tier (`remote`, cache/remote/): looked up after a local miss, under the key's lock
  (parallel local jobs wait, then hit locally); a remote entry is downloaded into a temporary,
  checked exactly as a local entry is, and published by the same rename, so nothing from the
  remote is used unchecked. An entry this process built is uploaded after it is published.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from trtpipe.errors import StageFailed, UserError
from trtpipe.cache.cache_dir import (
    Temporary,
    claim_cache_dir,
    discard_entry,
    real_folder,
    refuse_linked_file,
    remove_dead_temporaries,
)
from trtpipe.cache.entry_schema import record_problem
from trtpipe.cache.explain import explain_miss
from trtpipe.cache.holds import EntryHolds, touch_entry
from trtpipe.cache.files import (
    cache_errors_as_user_errors,
    disk_errors_as_user_errors,
    ensure_writable_dir,
    make_read_only,
    write_atomic,
)
from trtpipe.cache.hashing import artifact_digest, canonical_json, sha256_bytes, sha256_file
from trtpipe.cache.locks import held

if TYPE_CHECKING:
    from trtpipe.cache.remote.tier import RemoteTier, Transfer

log = logging.getLogger(__name__)

ENTRY_FILE = "entry.json"
_INDEX_LENGTH = 32
_HOLD_ATTEMPTS = 3


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
    origin: str = "local"  # "remote": downloaded from cache.remote by this lookup
    transfer: "Transfer | None" = None  # a remote hit's download time and bytes
    upload: str | None = None  # an entry that ran, with a writable remote: "uploaded", "present", "failed"


# What a stage computation returns: {"outputs": {kind: file name}, plus any JSON fields}.
Compute = Callable[[Path], dict]


def cache_key(material: dict) -> str:
    return sha256_bytes(canonical_json(material))


class ArtifactCache:
    def __init__(self, root: Path, lock_timeout: float = 7200.0, hold_entries: bool = False,
                 remote: "RemoteTier | None" = None) -> None:
        """`hold_entries`: hold every entry returned until `release` (a run does: runner/pipeline.py);
        off for a single lookup, so that an object nobody releases never keeps a lock.
        `remote`: the remote tier (cache.remote), or None."""
        fix = "set cache.dir (or TRTPIPE_CACHE) to a writable directory"
        self.root = ensure_writable_dir(Path(root), "cache directory", fix)
        self.lock_timeout = lock_timeout
        claim_cache_dir(self.root)
        remove_dead_temporaries(self.root / "tmp")
        self.holds = EntryHolds(self.root, lock_timeout) if hold_entries else None
        self.remote = remote

    def get_or_compute(self, stage: str, material: dict, compute: Compute,
                       required: tuple[str, ...] = (), known_files: Mapping[Path, str] | None = None,
                       source: Mapping[str, str] | None = None) -> CacheResult:
        """`required`: output kinds an entry must have to be trusted. `known_files`: files of
        verified entries (the stage's inputs) and their digests; see `_build`. `source`: the run's
        source model, `{"path", "sha256"}`, recorded in the miss index to explain a miss against
        entries of the same model (explain.py); not part of the key.

        With `hold_entries`, the entry is held (holds.py) until `release`: no pruner deletes it
        while this run uses it."""
        key = cache_key(material)
        for _ in range(_HOLD_ATTEMPTS):
            result = self._get_or_compute(stage, key, material, compute, required, known_files, source)
            if self.holds is None:
                touch_entry(result.entry.directory)
                return self._uploaded(stage, result)
            if self.holds.hold(key, result.entry.directory):
                return self._uploaded(stage, result)
            log.info("%s: cache entry %s… was pruned as it was published; looking again", stage, key[:12])
        raise StageFailed(f"{stage}: cache entry {key[:12]}… was deleted {_HOLD_ATTEMPTS} times as it was "
                          "published; a trtpipe-cache prune or cache.max_size of another process removes it at once")

    def release(self) -> None:
        """Let go of the entries this run used (prunable again)."""
        if self.holds is not None:
            self.holds.release()

    def _get_or_compute(self, stage: str, key: str, material: dict, compute: Compute,
                        required: tuple[str, ...], known_files: Mapping[Path, str] | None,
                        source: Mapping[str, str] | None = None) -> CacheResult:
        entry, problem = self._load(stage, key, required)
        if entry is not None:
            return CacheResult(entry, "cached", None)
        if self.holds is not None:  # our own shared hold would block our exclusive lock (flock is per open file)
            self.holds.drop(key)
        with self._lock(stage, key):
            entry, problem = self._load(stage, key, required)  # another process may have finished it
            if entry is not None:
                return CacheResult(entry, "cached", None)
            if problem:
                log.warning("cache entry %s/%s… is invalid (%s): discarded, rebuilding", stage, key[:12], problem)
                self._discard(self._entry_dir(stage, key))
            if self.remote is not None and self.remote.readable:
                found = self._fetch_remote(stage, key, required, known_files or {})
                if found is not None:
                    return CacheResult(found[0], "cached", None, origin="remote", transfer=found[1])
            earlier = self._previous(stage)
            reason = problem or explain_miss([item["material"] for item in earlier], material,
                                             source=dict(source) if source else None,
                                             sources=[item.get("source") for item in earlier])
            entry = self._build(stage, key, material, compute, known_files or {})
            self._remember(stage, key, material, source)
            return CacheResult(entry, "ran", reason)

    def _entry_dir(self, stage: str, key: str) -> Path:
        """entries/<stage>/<key>; entries/<stage> must be a real folder (`real_folder`, exit 2 otherwise)."""
        return real_folder(self.root, "entries", stage) / key

    def _load(self, stage: str, key: str, required: tuple[str, ...] = ()) -> tuple[CacheEntry | None, str | None]:
        directory = self._entry_dir(stage, key)
        if not directory.exists() and not directory.is_symlink():
            return None, None
        if directory.is_symlink() or not directory.is_dir():
            return None, "the entry is not a directory"
        try:
            record = json.loads((directory / ENTRY_FILE).read_text())
        except PermissionError:
            _refuse_private_entry(directory)
        except (OSError, ValueError) as error:
            return None, f"{ENTRY_FILE} unreadable: {error}"
        problem = _entry_problem(directory, record, stage, key, required)
        return (None, problem) if problem else (CacheEntry(directory, record), None)

    def _fetch_remote(self, stage: str, key: str, required: tuple[str, ...],
                      known_files: Mapping[Path, str]) -> "tuple[CacheEntry, Transfer] | None":
        """The remote's entry of `key`, downloaded, checked as a local entry is (`_entry_problem`)
        and published into entries/; None for a miss (the tier has said why, in one line)."""
        from trtpipe.cache.remote.tier import Transfer

        started = time.perf_counter()
        with disk_errors_as_user_errors(self.root), Temporary(self.root / "tmp") as temporary:
            fetched = self.remote.fetch(stage, key, temporary.path, known_files)
            if fetched is None:
                return None
            problem = _entry_problem(temporary.path, fetched.record, stage, key, required)
            if problem:
                self.remote.refuse(stage, key, problem, fetched.record)
                return None
            make_read_only(temporary.path)
            final = self._entry_dir(stage, key)
            os.rename(temporary.path, final)
        return CacheEntry(final, fetched.record), Transfer(time.perf_counter() - started, fetched.downloaded)

    def _uploaded(self, stage: str, result: CacheResult) -> CacheResult:
        """An entry this process built, sent to a writable remote (after it is published and held)."""
        if result.status != "ran" or self.remote is None or not self.remote.writable:
            return result
        done = self.remote.upload(stage, result.entry.directory, result.entry.record)
        return replace(result, upload="failed" if done is None else "uploaded" if done.published else "present")

    def _build(self, stage: str, key: str, material: dict, compute: Compute,
               known_files: Mapping[Path, str]) -> CacheEntry:
        temporary = None
        try:
            with disk_errors_as_user_errors(self.root):
                temporary = Temporary(self.root / "tmp")
                tmp = temporary.path
                result = dict(compute(tmp))
                outputs = result.pop("outputs")
                # Decision: an output that is a hard link to a file of a verified input entry (an
                # untouched weights file, onnx_io.save_model(link_data_under=)) is that file: its
                # digest is on record. Same inode, same bytes; entries are never modified.
                linked = _digests_by_inode(known_files)
                files = {p.name: linked.get(_inode(p)) or sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
                link_unchanged_files(tmp, files, known_files)
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
                make_read_only(tmp)  # entries never change; their files may be hard-linked (files.place_file)
                final = self._entry_dir(stage, key)  # checked again just before the rename
                os.rename(tmp, final)
        finally:
            if temporary is not None:
                temporary.close()
        return CacheEntry(final, record)

    def _discard(self, directory: Path) -> None:
        discard_entry(self.root, directory)

    def _lock(self, stage: str, key: str):
        path = self.root / "locks" / f"{key}.lock"
        refuse_linked_file(self.root, path)
        return held(path, self.lock_timeout, stage=stage, purpose=f"which is computing the same entry ({key[:12]}…)")

    def _index_path(self, stage: str) -> Path:
        return self.root / "index" / f"{stage}.json"

    def _previous(self, stage: str) -> list[dict]:
        """The miss index's items: `{"key", "material", "source"}` (source: absent before issue 33)."""
        if self._index_path(stage).is_symlink():  # never read through a link (write_atomic replaces it)
            return []
        try:
            items = json.loads(self._index_path(stage).read_text())
            return [{"material": item["material"],
                     "source": item.get("source") if isinstance(item.get("source"), dict) else None}
                    for item in items]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []

    def _remember(self, stage: str, key: str, material: dict, source: Mapping[str, str] | None = None) -> None:
        lock = self.root / "locks" / f"index-{stage}.lock"
        refuse_linked_file(self.root, lock)
        with held(lock, 60, purpose="which is updating the miss index", announce=False):
            try:
                items = [] if self._index_path(stage).is_symlink() else json.loads(self._index_path(stage).read_text())
            except (OSError, ValueError):
                items = []
            if not isinstance(items, list):  # a damaged index only loses miss explanations
                items = []
            items = [i for i in items if isinstance(i, dict)]
            item = {"key": key, "material": material, **({"source": dict(source)} if source else {})}
            items = [item] + [i for i in items if i.get("key") != key]
            with cache_errors_as_user_errors(self._index_path(stage), "miss index"):
                write_atomic(self._index_path(stage), json.dumps(items[:_INDEX_LENGTH], sort_keys=True).encode())


def _entry_problem(directory: Path, record: object, stage: str, key: str,
                   required: tuple[str, ...]) -> str | None:
    """Why the entry in `directory` (its parsed entry.json: `record`) is not to be trusted, or None:
    the record's schema, its material hashing to `key`, every file's sha256, the required outputs."""
    problem = record_problem(record, stage, key, directory)
    if problem:
        return f"{ENTRY_FILE}: {problem}"
    if _key_of(record["material"]) != key:
        return f"{ENTRY_FILE}: its material does not hash to its key"
    for name, digest in record["files"].items():
        try:
            if sha256_file(directory / name) != digest:
                return f"{name} does not match its recorded sha256"
        except PermissionError:
            _refuse_private_entry(directory)
    missing = [kind for kind in required if kind not in record["outputs"]]
    if missing:
        return f"it lacks the output(s) {missing} the stage declares"
    return None


def _refuse_private_entry(directory: Path) -> None:
    """An entry another user made from a model only they may read: their files keep its
    permissions (files.narrow_modes), so it is neither trusted blind nor deleted: exit 2."""
    raise UserError(f"cache entry {directory} is not readable for you: another user made it from a model "
                    "only they may read", "set cache.dir (or TRTPIPE_CACHE) to a cache of your own")


def _key_of(material: dict) -> str | None:
    try:
        return cache_key(material)
    except ValueError:  # NaN or infinity, which no key ever held
        return None


def _inode(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def link_unchanged_files(folder: Path, files: Mapping[str, str], known_files: Mapping[Path, str]) -> None:
    """Replace each file of `folder` whose digest is that of a file of a verified input entry by a
    hard link to that file.

    Decision (issue 33, item 1): a stage whose output bytes equal its input's stores nothing new
    (upgrade_opset on a model already at its target opset wrote a second full copy: 117 MB more
    for a 117 MB model). Same digest, same bytes; entries are never modified and their files are
    read-only, so sharing the inode is safe, and `trtpipe-cache` counts it once."""
    by_digest = {digest: Path(path) for path, digest in known_files.items()}
    for name, digest in files.items():
        original = by_digest.get(digest)
        target = folder / name
        try:
            if original is None or _inode(original) == _inode(target) \
                    or original.stat().st_size != target.stat().st_size:
                continue
            staged = folder / f".{name}.link"
            os.link(original, staged, follow_symlinks=False)
        except OSError:  # gone meanwhile, another file system, too many links: keep the written file
            continue
        os.replace(staged, target)


def _digests_by_inode(known_files: Mapping[Path, str]) -> dict[tuple[int, int], str]:
    digests = {}
    for path, digest in known_files.items():
        try:
            digests[_inode(Path(path))] = digest
        except OSError:  # gone meanwhile: then nothing links to it
            continue
    return digests
