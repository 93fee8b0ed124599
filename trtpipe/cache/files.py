"""Small file-system primitives: atomic writes, private copies, disk errors as user errors."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import uuid
from contextlib import contextmanager
from pathlib import Path

from trtpipe.errors import UserError

# Errors the user fixes on their side (disk full, read-only or forbidden location).
# EFBIG: a file-size limit (ulimit -f, quota) reached.
_FICLONE = 0x40049409  # linux/fs.h: share the source's blocks (a reflink)
_CHUNK_BYTES = 1 << 30
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


def copy_file(source: Path, target: Path) -> None:
    """Copy `source` to a new file `target` with the same permission bits: a reflink where the
    file system offers one (btrfs, XFS: instant, no extra disk), else a copy in the kernel.

    Decision (issue 22, item 6): a file a user may edit in the run directory (a plan, a report,
    a script) is the user's, never a hard link to the cache's. With a link, editing
    run1/precision/precision_plan.json in place changed the cache entry and every other run
    directory's copy (and broke their manifests). A copy's bytes are the entry's, so the
    manifest's digests hold. `target` is replaced, never written through: an older run's hard
    link (or a symlink) at that name is unlinked first, so nothing it points to changes.
    """
    place_file(source, target, link=False)


def place_file(source: Path, target: Path, link: bool) -> str:
    """Put `source`'s bytes at `target` (replaced, never written through); returns how:
    "reflink", "link" or "copy".

    Decision (issue 33, item 1): disk in proportion to what changed. A reflink first: a private
    copy-on-write file, no extra disk. Else, with `link`, a hard link to `source` made read-only
    (all write bits removed: the file is shared, so no user without root can write it in place,
    and a write by root or after a chmod changes its sha256, which every cache hit and
    `trtpipe-verify` check). Else, or when the link is refused (another file system: EXDEV;
    another user's file under fs.protected_hardlinks: EPERM; too many links: EMLINK), a copy.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    source_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        mode = stat.S_IMODE(os.fstat(source_fd).st_mode)
        if link and _reflink(source_fd, target, mode):
            return "reflink"
        if link and _hard_link(source_fd, source, target, mode):
            return "link"
        target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            copy_fd(source_fd, target_fd)
            os.fchmod(target_fd, mode)  # the permissions follow the source (item 8), whatever the umask
        finally:
            os.close(target_fd)
        return "copy"
    finally:
        os.close(source_fd)


def _reflink(source_fd: int, target: Path, mode: int) -> bool:
    target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.ioctl(target_fd, _FICLONE, source_fd)
        os.fchmod(target_fd, mode)
        return True
    except OSError:  # no reflinks here (ext4, tmpfs, another file system)
        os.close(target_fd)
        target_fd = -1
        target.unlink(missing_ok=True)
        return False
    finally:
        if target_fd != -1:
            os.close(target_fd)


def _hard_link(source_fd: int, source: Path, target: Path, mode: int) -> bool:
    """`target` as a second name of the opened `source`, which is made read-only first."""
    try:
        if mode & 0o222:
            os.fchmod(source_fd, mode & ~0o222)
        os.link(source, target, follow_symlinks=False)
        opened, linked = os.fstat(source_fd), os.lstat(target)
        if (opened.st_dev, opened.st_ino) == (linked.st_dev, linked.st_ino):
            return True
        target.unlink()  # `source` was replaced after it was opened: copy the opened file instead
        return False
    except OSError:  # EXDEV, EPERM, EMLINK, or a chmod refused (another user's entry): copy
        target.unlink(missing_ok=True)
        return False


def make_read_only(folder: Path) -> None:
    """Remove the write bits of every regular file directly in `folder` (a cache entry before it
    is published): entries never change, and their files may be hard-linked (`place_file`)."""
    for path in Path(folder).iterdir():
        if path.is_file() and not path.is_symlink():
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o222:
                os.chmod(path, mode & ~0o222)


def copy_fd(source_fd: int, target_fd: int) -> None:
    """Copy the whole of `source_fd` into the empty `target_fd`: FICLONE, else copy_file_range, else read/write."""
    try:
        fcntl.ioctl(target_fd, _FICLONE, source_fd)
        return
    except OSError:  # no reflinks here (ext4, tmpfs, another file system): copy
        pass
    size = os.fstat(source_fd).st_size
    offset = 0
    while offset < size:
        try:
            copied = os.copy_file_range(source_fd, target_fd, min(size - offset, _CHUNK_BYTES), offset)
        except OSError as error:
            if error.errno in _USER_FIXABLE_ERRNOS:
                raise
            copied = _copy_by_reading(source_fd, target_fd, offset, min(size - offset, _CHUNK_BYTES))
        if copied == 0:
            raise OSError(errno.EIO, f"the file ended at byte {offset} of {size} while it was copied")
        offset += copied


def _copy_by_reading(source_fd: int, target_fd: int, offset: int, length: int) -> int:
    data = os.pread(source_fd, length, offset)
    os.lseek(target_fd, offset, os.SEEK_SET)
    os.write(target_fd, data)
    return len(data)


def narrow_modes(out_dir: Path, inputs: list[Path]) -> None:
    """Take from every file under `out_dir` the read and write bits for group and others that
    some input file lacks: outputs are never more readable than what they are made of.

    Decision (issue 22, item 8): a model kept 0600 (its weights are confidential) was
    written to the cache and the run directory as 0644 (the umask's default); the weights,
    cast or not, are in those files. An input that cannot be stat'ed narrows nothing."""
    allowed = 0o077
    for path in inputs:
        try:
            allowed &= os.stat(path).st_mode
        except OSError:
            continue
    taken = 0o077 & ~allowed
    if not taken:
        return
    for path in Path(out_dir).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & ~taken)


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
