"""Entries a run is using: a shared lock on each one's key lock, held until the run ends.

Decisions:
- A run reads its entries' files for its whole length (a later stage reads an earlier
  stage's entry, the run directory copies them in the background). `trtpipe-cache prune`
  and `cache.max_size` delete an entry only after taking its key lock (locks/<key>.lock,
  the lock a computing process holds, cache.py) exclusively and without waiting; a run
  holds that same lock *shared* (flock LOCK_SH) for every entry it used, so any number of
  runs share an entry and no pruner can delete it under them. The kernel drops the lock
  when the run dies.
- A shared hold cannot be taken while the same process holds the exclusive lock (flock
  locks belong to open files), so a run takes it after computing, then checks that the
  entry is still there: a prune in between means the caller looks up the entry again.
- The descriptors are close-on-exec: a child (trtexec) must not keep a lock alive.
- The last use of an entry is its directory's mtime, set on every use (one utime call,
  nothing written inside the entry: its files and digests stay as published).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from trtpipe.cache.cache_dir import real_folder, refuse_linked_file
from trtpipe.cache.files import cache_errors_as_user_errors
from trtpipe.cache.locks import open_lock_file

_POLL_SECONDS = 0.05


def open_lock(root: Path, key: str) -> int:
    """The key's lock file (locks/<key>.lock), opened without following a link (refused, exit 2)."""
    path = real_folder(root, "locks") / f"{key}.lock"
    refuse_linked_file(root, path)
    with cache_errors_as_user_errors(path, "lock file"):
        return open_lock_file(path)  # read-only where another user of a shared cache created it


def touch_entry(directory: Path) -> None:
    """Record a use of the entry (its directory's mtime); another user's entry keeps its time."""
    try:
        os.utime(directory, None, follow_symlinks=False)
    except OSError:
        pass


class EntryHolds:
    def __init__(self, root: Path, timeout: float) -> None:
        self.root = root
        self.timeout = timeout
        self._fds: dict[str, int] = {}

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self._fds)

    def hold(self, key: str, directory: Path) -> bool:
        """Hold `key` shared; False (nothing held) when its entry vanished before the hold."""
        if key in self._fds:
            return True
        fd = open_lock(self.root, key)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # a pruner deciding on it, or a process rebuilding it
                if time.monotonic() > deadline:
                    os.close(fd)
                    return False
                time.sleep(_POLL_SECONDS)
        if not os.path.isdir(directory) or os.path.islink(directory):
            os.close(fd)
            return False
        self._fds[key] = fd
        touch_entry(directory)
        return True

    def drop(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def release(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)
