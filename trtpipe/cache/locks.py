"""The cache's locks: one per key (concurrent jobs wait, then hit), one per miss index and
one for the source-digest memo. `flock` on a file that stays in place.

Decisions:
- `flock`, taken on a file opened without following a link (O_NOFOLLOW) and never
  truncated by a waiter: the kernel releases the lock when its holder exits, however it
  ends (SIGKILL, the OOM killer), so a lock is never stale. A wait that times out
  therefore means a live process holds it; the message says who and never advises deleting
  the file (a deleted lock file lets a second writer start beside the first).
- The holder writes `host pid stage since` into the lock file once it has the lock, and
  empties it before releasing; a waiter reads it to say whom it waits for.
- Waiting is visible: one line on the console (the `trtpipe` logger, which the console
  shows) when a wait starts, naming the holder, then a progress line at 2 s, 10 s, 30 s
  and every minute after.
- An OSError on the lock file (no permission on another user's cache, a full disk, a
  symbolic-link loop) is the user's to fix: a UserError in one line naming the file
  (files.cache_errors_as_user_errors).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from trtpipe.cache.files import cache_errors_as_user_errors
from trtpipe.errors import StageFailed

log = logging.getLogger("trtpipe")  # the console shows this logger's INFO lines

_FIRST_POLL, _MAX_POLL = 0.02, 0.5  # seconds between attempts: growing, to wake soon after a short hold
_PROGRESS_AT = (2.0, 10.0, 30.0, 60.0)  # then every 60 s


def _progress_times():
    yield from _PROGRESS_AT
    after = _PROGRESS_AT[-1]
    while True:
        after += 60.0
        yield after


def holder_text(path: Path) -> str:
    """Who holds the lock, from what it wrote into the lock file: 'pid 123 on host (sanitize, since 10:02:03)'."""
    try:
        with open(path, "rb") as handle:
            info = json.loads(handle.read(4096) or b"null")
        host, pid = str(info["host"]), int(info["pid"])
    except (OSError, ValueError, TypeError, KeyError):
        return "another process (it has not written its name yet)"
    stage = info.get("stage")
    since = info.get("since")
    when = time.strftime("%H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else None
    details = ", ".join(item for item in (stage, f"since {when}" if when else None) if item)
    return f"pid {pid} on {host}" + (f" ({details})" if details else "")


@contextmanager
def held(path: Path, timeout: float, *, purpose: str, stage: str | None = None, announce: bool = True):
    """Hold the flock on `path` (created if missing) for the `with` body.

    `purpose`: what the holder is doing, for the messages ("computing the same entry").
    `announce`: say on the console that it waits (False for the short bookkeeping locks,
    whose wait is logged at debug level only)."""
    path = Path(path)
    with cache_errors_as_user_errors(path, "lock file"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(path)
    try:
        _acquire(fd, path, timeout, purpose, stage, announce)
        _write_holder(fd, stage)
        try:
            yield
        finally:
            _clear_holder(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def open_lock_file(path: Path) -> int:
    """Read-write (to write the holder's name), else read-only: an flock needs no write access, so
    a lock file another user of a shared cache created (0644) still locks; the name is then not
    written."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except PermissionError as denied:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # not there and not creatable here: the first error says why
            raise denied from None


def _acquire(fd: int, path: Path, timeout: float, purpose: str, stage: str | None, announce: bool) -> None:
    if _try_lock(fd, path):
        return
    who = holder_text(path)
    lead = f"{stage}: " if stage else ""
    prefix = "  " + lead
    say = log.info if announce else log.debug
    say("%swaiting for %s, %s (lock %s; up to cache.lock_timeout=%.0f s)", prefix, who, purpose, path, timeout)
    started = time.monotonic()
    progress = _progress_times()
    next_progress = next(progress)
    pause = _FIRST_POLL
    while True:
        waited = time.monotonic() - started
        if waited >= timeout:
            raise StageFailed(
                f"{lead}waited {timeout:.0f} s for {holder_text(path)}, {purpose} (lock {path}); "
                "that process is still running (a lock is released when its holder exits, so it is never "
                "stale). Fix: let it finish, or stop it, then rerun (the rerun uses its result), "
                f"or wait longer: cache.lock_timeout={max(2 * timeout, 60):.0f}")
        if waited >= next_progress:
            say("%sstill waiting for %s (%.0f s so far)", prefix, holder_text(path), waited)
            next_progress = next(progress)
        time.sleep(min(pause, max(timeout - waited, 0.0)))
        pause = min(pause * 2, _MAX_POLL)
        if _try_lock(fd, path):
            say("%sgot the lock after %.1f s", prefix, time.monotonic() - started)
            return


def _try_lock(fd: int, path: Path) -> bool:
    with cache_errors_as_user_errors(path, "lock file"):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def _write_holder(fd: int, stage: str | None) -> None:
    """Best effort: a full disk must not stop a run that holds its lock; waiters then say
    'another process'."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "stage": stage, "since": round(time.time(), 3)}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
    except OSError:
        pass


def _clear_holder(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
