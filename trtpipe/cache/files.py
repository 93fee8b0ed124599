"""Small file-system primitives: atomic writes, linking, disk errors as user errors."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

from trtpipe.errors import UserError

# Errors the user fixes on their side (disk full, read-only or forbidden location).
# EFBIG: a file-size limit (ulimit -f, quota) reached.
_USER_FIXABLE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, fsync, then rename: readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link (instant, no extra disk) where possible, else copy.

    Decision: the run directory gets its own names for the cached files so that an
    archived run directory is self-contained; a hard link costs nothing, and a later
    edit of the linked file is caught by the cache's digest check. Except external
    data: onnx (1.23) refuses to read an external-data file with more than one hard
    link (or a symlink), so linking would make the cache entry itself unreadable;
    those are copied (copy_file_range on Linux: fast, and a reflink where supported).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if source.suffix != ".onnx" and source.name.endswith(".data"):
        shutil.copyfile(source, target)
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextmanager
def disk_errors_as_user_errors(where: Path):
    try:
        yield
    except OSError as error:
        if error.errno in _USER_FIXABLE_ERRNOS:
            raise UserError(
                f"cannot write to {where}: {os.strerror(error.errno)}",
                "free disk space or choose a writable directory (cache.dir, TRTPIPE_CACHE or hydra.run.dir)",
            ) from error
        raise


# The same, plus a symbolic-link loop (ELOOP: also what O_NOFOLLOW gives for a link) and a
# path component that is not a folder: damage to the cache's layout the user removes.
_CACHE_FIXABLE_ERRNOS = _USER_FIXABLE_ERRNOS | {errno.ELOOP, errno.ENOTDIR}


@contextmanager
def cache_errors_as_user_errors(path: Path, what: str):
    """An OSError on the cache's bookkeeping (marker, locks, digest memo, miss index) as a UserError
    in one line: the file, the reason, and a fix for that reason.

    Decision: these files are the cache's, not the stage's, so no stage failed; the fixes are the
    user's (free space, a cache of one's own, remove a link), exit 2. Any other errno is left to
    propagate (a defect, reported as such)."""
    try:
        yield
    except OSError as error:
        if error.errno not in _CACHE_FIXABLE_ERRNOS:
            raise
        where = Path(error.filename) if isinstance(error.filename, str) else Path(path)
        cache = _cache_root_of(Path(path))
        if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            fix = f"free space on the disk holding {cache}, or set TRTPIPE_CACHE (or cache.dir) to a folder on a disk with room"
        elif error.errno in (errno.ELOOP, errno.ENOTDIR):
            fix = f"rm {where}  (a symbolic link or a file in the way; trtpipe recreates it)"
        else:
            fix = (f"use a cache you can write: set TRTPIPE_CACHE (or cache.dir) to a folder of your own, "
                   f"or ask the owner of {cache} to give you write access to it")
        raise UserError(f"cannot use the cache's {what} {where}: {os.strerror(error.errno)}", fix) from error


def _cache_root_of(path: Path) -> Path:
    """The cache folder above a bookkeeping file (locks/x.lock, index/x.json) or the file's own folder."""
    parent = path.parent
    return parent.parent if parent.name in ("locks", "index", "tmp", "entries") else parent


def ensure_writable_dir(path: Path, what: str, fix: str) -> Path:
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise UserError(f"{what} {path} is not writable ({os.strerror(error.errno or 0)})", fix) from error
    return path
