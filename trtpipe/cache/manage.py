"""See and bound the cache: its size, its entries per stage, and pruning least recently used first.

Used by `trtpipe-cache` (info, prune, clear) and by `cache.max_size` after each run.
Modelled on ccache (-s, -M, -C), `pip cache` and Bazel's disk cache.

Decisions:
- Sizes are the bytes of the files (st_size), every file counted once however many hard links
  it has (an entry may hard-link an input entry's weights file, cache.py): what deleting frees
  (folders themselves are not counted: a file system's detail). The total covers the whole
  cache folder; only entries are ever deleted (built-in models, the TensorRT timing cache, the
  miss index and the lock files stay: small, and the lock files must never be unlinked while
  another process may open them).
- Units as ccache: K, M, G, T are powers of 1000, Ki, Mi, Gi, Ti powers of 1024; a bare number
  is bytes. Ages: s, m, h, d, w.
- Least recently used first: an entry's last use is its directory's mtime (holds.py).
- An entry is deleted only with its key lock taken exclusively without waiting: an entry
  a run is using (shared hold) or computing is skipped and counted as held, never waited for.
  Deleting renames it into a marked temporary under tmp/ first (cache_dir.discard_entry).
- A folder that is not a trtpipe cache is refused (exit 2), never scanned or cleaned. A cache.dir
  that is a symbolic link to a cache (the layout docs/cache.md recommends, which runs accept) is
  managed at its target (issue 32, item 10); a link inside the cache is still refused.
- Another user's cache (a shared folder, mode 1777): a folder this user may not read or write
  (tmp/, entries/<stage>, an entry) is one line, exit 2, naming the folder and its owner
  (issue 32, item 8); entries already deleted are counted in that line (each deletion is one
  rename, so no entry is ever half deleted).
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtpipe.cache.cache_dir import (
    CACHE_MARKER,
    discard_entry,
    is_trtpipe_cache,
    real_folder,
    remove_dead_temporaries,
)
from trtpipe.cache.holds import open_lock
from trtpipe.errors import UserError

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]i?)?b?\s*", re.IGNORECASE)
_AGE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([smhdw])\s*", re.IGNORECASE)
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_KEY = re.compile(r"[0-9a-f]{64}")


def parse_size(text: object, what: str = "the size") -> int:
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise UserError(f"{what} {str(text)!r} is not a size (units K, M, G, T, Ki, Mi, Gi, Ti)",
                        f"{what}=2G" if what.startswith("cache.") else f"{what} 2G")
    unit = (match.group(2) or "").lower()
    power = "kmgt".index(unit[0]) + 1 if unit else 0
    return int(float(match.group(1)) * (1024 if unit.endswith("i") else 1000) ** power)


def parse_age(text: object, what: str = "the age") -> float:
    match = _AGE.fullmatch(str(text))
    if not match:
        raise UserError(f"{what} {str(text)!r} is not an age (units s, m, h, d, w)", f"{what} 7d")
    return float(match.group(1)) * _AGE_SECONDS[match.group(2).lower()]


def human_size(size: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


@dataclass
class Entry:
    stage: str
    key: str
    directory: Path
    last_use: float
    files: dict[tuple[int, int], int]  # (device, inode) -> bytes

    @property
    def size(self) -> int:
        return sum(self.files.values())


@dataclass
class CacheScan:
    root: Path
    total: int  # bytes under the whole cache folder, each file once
    entries: list[Entry]  # least recently used first

    @property
    def entries_size(self) -> int:
        return _unique_size(self.entries)


@dataclass
class PruneReport:
    removed: list[Entry] = field(default_factory=list)
    held: list[Entry] = field(default_factory=list)
    freed: int = 0
    size_after: int = 0


def open_cache(root: Path) -> Path | None:
    """The cache folder to manage; None when there is none yet; exit 2 when it is not a trtpipe cache."""
    root = Path(root).expanduser().absolute()
    if root.is_symlink():  # cache.dir linked as a whole: manage the folder it names
        root = root.resolve()
    if not root.exists() and not root.is_symlink():
        return None
    if root.is_dir() and not any(root.iterdir()):
        return None
    if not is_trtpipe_cache(root):
        raise UserError(f"{root} is not a trtpipe cache (no {CACHE_MARKER}, or a linked or damaged layout); "
                        "trtpipe-cache manages only trtpipe's own caches",
                        "pass the cache folder with --dir PATH, or set TRTPIPE_CACHE to it")
    return root


def scan(root: Path) -> CacheScan:
    try:
        return _scan(root)
    except PermissionError as error:
        raise permission_denied(root, error, "read") from None


def _scan(root: Path) -> CacheScan:
    entries = []
    stages = root / "entries"
    for stage_dir in _real_dirs(stages):
        for directory in _real_dirs(stage_dir):
            if not _KEY.fullmatch(directory.name):
                continue
            try:
                info = os.lstat(directory)
            except FileNotFoundError:  # deleted meanwhile
                continue
            entries.append(Entry(stage_dir.name, directory.name, directory, info.st_mtime, _file_sizes(directory)))
    entries.sort(key=lambda e: (e.last_use, e.stage, e.key))
    return CacheScan(root, sum(_file_sizes(root).values()), entries)


def prune(root: Path, *, max_size: int | None = None, older_than: float | None = None,
          everything: bool = False, keep: frozenset[str] = frozenset(), now: float | None = None) -> PruneReport:
    """Delete entries, least recently used first, until the cache is at most `max_size` bytes
    and none is older than `older_than` seconds (since its last use), or all (`everything`);
    `keep`: keys never deleted."""
    report = PruneReport()
    try:
        return _prune(root, report, max_size, older_than, everything, keep, now)
    except PermissionError as error:
        done = f" ({len(report.removed)} entries were deleted before it)" if report.removed else " (nothing was deleted)"
        raise permission_denied(root, error, "delete entries in", done) from None


def _prune(root: Path, report: PruneReport, max_size: int | None, older_than: float | None, everything: bool,
           keep: frozenset[str], now: float | None) -> PruneReport:
    remove_dead_temporaries(real_folder(root, "tmp"))  # deleting goes through tmp/ (a real folder)
    found = scan(root)
    now = time.time() if now is None else now
    holders: dict[tuple[int, int], int] = {}
    for entry in found.entries:
        for inode in entry.files:
            holders[inode] = holders.get(inode, 0) + 1
    total = found.total
    for entry in found.entries:
        too_big = max_size is not None and total > max_size
        too_old = older_than is not None and now - entry.last_use > older_than
        if not (too_big or too_old or everything) or entry.key in keep:
            continue
        if not _delete_unheld(root, entry):
            report.held.append(entry)
            continue
        report.removed.append(entry)
        for inode, size in entry.files.items():
            holders[inode] -= 1
            if holders[inode] == 0:  # its last link in the cache is gone
                total -= size
                report.freed += size
    report.size_after = total
    return report


def permission_denied(root: Path, error: PermissionError, doing: str, done: str = "") -> UserError:
    """A folder of another user's cache this user may not read or change: the folder, its owner, the fix."""
    where = Path(error.filename) if isinstance(error.filename, str) else root
    if not os.path.lexists(where):  # a temporary it could not make: the folder it was to be made in
        where = where.parent
    owner = _owner(where) or _owner(root) or "another user"
    return UserError(f"cannot {doing} the cache {root}: {where} is {owner}'s and its permissions keep you out "
                     f"({os.strerror(error.errno or 0)}){done}",
                     f"run trtpipe-cache as {owner} (the cache's owner), or ask {owner} to give you read and write "
                     f"access to {root}, or use a cache of your own (--dir PATH)")


def _owner(path: Path) -> str | None:
    import pwd

    try:
        uid = os.lstat(path).st_uid
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def _delete_unheld(root: Path, entry: Entry) -> bool:
    fd = open_lock(root, entry.key)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        discard_entry(root, entry.directory)
        return True
    finally:
        os.close(fd)  # releases the lock; the lock file stays (see the module's decisions)


def _real_dirs(path: Path) -> list[Path]:
    try:
        children = sorted(os.scandir(path), key=lambda d: d.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(d.path) for d in children if d.is_dir(follow_symlinks=False)]


def _file_sizes(top: Path) -> dict[tuple[int, int], int]:
    """Every regular file under `top`, links not followed, by inode."""
    sizes = {}
    for folder, dirs, files in os.walk(top):  # os.walk never descends into linked folders
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:  # deleted meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                sizes[(info.st_dev, info.st_ino)] = info.st_size
    return sizes


def _unique_size(entries: list[Entry]) -> int:
    sizes = {}
    for entry in entries:
        sizes.update(entry.files)
    return sum(sizes.values())
