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
