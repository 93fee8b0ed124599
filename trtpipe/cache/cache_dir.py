"""What makes a directory trtpipe's cache, and which temporaries in it are trtpipe's to delete.

Decisions:
- A cache is marked by `TRTPIPE_CACHE.json` (tool name + format version) at its root.
  trtpipe uses an empty or new folder (and marks it) or a marked one; any other non-empty
  folder is refused (exit 2): cache.dir pointed at a project folder or $HOME must never
  have trtpipe create, and later clean, things in it.
- A cache written before the marker existed is adopted (marked) when its layout is
  unmistakably trtpipe's: the four directories entries/, tmp/, locks/, index/ that every
  earlier version created together, all real directories, and nothing at the top level
  but trtpipe's own names. Anything else is refused.
- A symlinked tmp/ (or entries/, locks/, index/) is refused: cleanup must never reach into a
  directory elsewhere, and trtpipe writes only inside the cache and the run directory.
- Each temporary is a directory tmp/<id>/ holding the marker-and-lock file `TRTPIPE_TMP`
  and the entry being built (tmp/<id>/entry/). The writer holds an flock on `TRTPIPE_TMP`
  for the temporary's whole life; the kernel drops it when the writer dies, whatever its
  PID namespace or host name. Cleanup deletes only a directory with that marker whose lock
  it can take; an unmarked directory (or a symlink) is not trtpipe's and is left alone.
  The lock file is created under another name, locked, then renamed into place, so no
  cleaner can ever see a marked temporary whose lock is not yet held.
- Temporaries of earlier versions (<host>-<pid>-<id>, discarded-<id>, unmarked) are left in
  place: their owners cannot be told apart from live ones; delete them by hand.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import shutil
import stat
import uuid
from pathlib import Path

from trtpipe.errors import UserError
from trtpipe.cache.files import cache_errors_as_user_errors, write_atomic

log = logging.getLogger(__name__)

CACHE_MARKER = "TRTPIPE_CACHE.json"
CACHE_FORMAT = 1
TMP_MARKER = "TRTPIPE_TMP"
SUBDIRS = ("entries", "tmp", "locks", "index")
# Top-level names earlier versions of trtpipe created in a cache.
_KNOWN_NAMES = set(SUBDIRS) | {"builtin", "timing_cache", CACHE_MARKER}


def _transient(name: str) -> bool:
    """Files that appear for an instant while a cache is being claimed (write probes, atomic writes)."""
    return name.startswith(".write-probe-") or name.startswith(f".{CACHE_MARKER}.")


def claim_cache_dir(root: Path) -> None:
    """Make sure `root` (existing and writable) is a trtpipe cache: mark it, adopt it, or refuse."""
    marker = root / CACHE_MARKER
    fix_hint = f"set cache.dir (or TRTPIPE_CACHE) to an empty or new folder, or to a trtpipe cache (it holds {CACHE_MARKER})"
    # One listing decides: a concurrent first user writes the marker before anything else.
    children = [p for p in root.iterdir() if not _transient(p.name)]
    if any(p.name == CACHE_MARKER for p in children):
        _check_marker(marker, fix_hint)
    else:
        if children and not _old_layout(root, children):
            raise UserError(f"cache directory {root} is not empty and is not a trtpipe cache (no {CACHE_MARKER})",
                            fix_hint)
        if children:
            log.info("adopting the trtpipe cache %s written before caches were marked", root)
        with cache_errors_as_user_errors(marker, "marker"):
            write_atomic(marker, json.dumps({"tool": "trtpipe", "format": CACHE_FORMAT}).encode())
    for sub in SUBDIRS:
        linked = root / sub
        if linked.is_symlink():  # tmp/ above all: cleanup must never reach through a link
            raise UserError(f"the cache's {sub}/ ({linked}) is a symbolic link; trtpipe writes and cleans "
                            "only real folders inside its cache (link the whole cache.dir instead)",
                            f"rm {linked}  (trtpipe recreates {sub}/ as a folder)")
        with cache_errors_as_user_errors(linked, "folder"):
            linked.mkdir(exist_ok=True)


def real_folder(root: Path, *parts: str) -> Path:
    """`root/parts...`, each level created as a real folder if missing; a level that is a symbolic
    link, or not a folder, is refused (exit 2) before anything is written or deleted under it.

    Decision (issue 22, item 2): a symlinked `entries/<stage>` made trtpipe publish new entries
    outside the cache, and a folder out there that happened to carry a key's name was
    "discarded" (deleted). Every level trtpipe writes or deletes under is checked with lstat."""
    path = root
    for part in parts:
        path = path / part
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            _refuse(root, path, "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder")
    return path


def refuse_linked_file(root: Path, path: Path) -> None:
    """A file trtpipe writes, locks or replaces in its cache (a lock, the memo, the miss index)
    that is a symbolic link: refused (exit 2), never opened through the link."""
    if os.path.islink(path):
        _refuse(root, path, "a symbolic link")


def _refuse(root: Path, path: Path, what: str) -> None:
    name = path.relative_to(root).as_posix()
    raise UserError(f"the cache's {name} ({path}) is {what}; trtpipe writes and deletes only real files and "
                    "folders inside its cache (link the whole cache.dir instead)",
                    f"rm {shlex.quote(str(path))}  (trtpipe recreates it)")


def is_trtpipe_cache(root: Path) -> bool:
    """A non-empty folder that claim_cache_dir accepts as it is (marked, or an unmarked cache of an
    earlier version, no linked subfolder): trtpipe's to name, use and suggest deleting."""
    try:
        if root.is_symlink() or not root.is_dir():
            return False
        children = [p for p in root.iterdir() if not _transient(p.name)]
        if not children:
            return False
        if any(p.name == CACHE_MARKER for p in children):
            _check_marker(root / CACHE_MARKER, "")
        elif not _old_layout(root, children):
            return False
        return not any((root / sub).is_symlink() for sub in SUBDIRS)
    except (OSError, UserError):
        return False


def _check_marker(marker: Path, fix_hint: str) -> None:
    try:
        if marker.is_symlink():
            raise ValueError("a symbolic link")
        record = json.loads(marker.read_text())
    except PermissionError as error:
        # Issue 22, item 16: another user's cache (its marker written under umask 077) is not
        # "not a trtpipe cache marker": it is one this user may not read.
        raise UserError(f"the cache marker {marker} cannot be read ({os.strerror(error.errno or 0)}): the cache "
                        "belongs to another user, or its permissions keep you out",
                        "set cache.dir (or TRTPIPE_CACHE) to a folder of your own, or ask the cache's owner to "
                        "make it readable and writable for you") from None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("tool") != "trtpipe" or type(record.get("format")) is not int:
        raise UserError(f"{marker} is not a trtpipe cache marker", fix_hint)
    if record["format"] > CACHE_FORMAT:
        raise UserError(f"cache {marker.parent} has format {record['format']}, newer than this trtpipe's "
                        f"({CACHE_FORMAT})", "upgrade trtpipe, or set cache.dir (or TRTPIPE_CACHE) to another folder")


def _old_layout(root: Path, children: list[Path]) -> bool:
    names = {p.name for p in children}
    if not names <= _KNOWN_NAMES or not set(SUBDIRS) <= names:
        return False
    return all(p.is_dir() and not p.is_symlink() for p in children if p.name != CACHE_MARKER)


class Temporary:
    """A marked, locked directory under tmp/: `path` is where the contents go (tmp/<id>/entry)."""

    def __init__(self, tmp_root: Path, make_path: bool = True) -> None:
        self.container = tmp_root / uuid.uuid4().hex
        self.container.mkdir()
        partial = self.container / f".{TMP_MARKER}.partial"
        self._fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_RDWR | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.write(self._fd, b"trtpipe temporary: deleted by trtpipe once no process holds this lock\n")
        os.rename(partial, self.container / TMP_MARKER)
        self.path = self.container / "entry"
        if make_path:
            self.path.mkdir()

    def close(self) -> None:
        """Delete the temporary (whatever is left of it), then release the lock."""
        shutil.rmtree(self.container, ignore_errors=True)
        os.close(self._fd)

    def __enter__(self) -> "Temporary":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def discard_entry(root: Path, directory: Path) -> bool:
    """Delete an entry directory safely; False when it was already gone.

    Rename into a marked temporary first so that no reader can see a half-deleted entry,
    and a crash midway leaves something the next cleanup removes. The rename moves a
    symbolic link itself, never what it points to, and rmtree does not follow links."""
    with Temporary(root / "tmp", make_path=False) as trash:
        try:
            os.rename(directory, trash.path)
        except FileNotFoundError:
            return False
    return True


def remove_dead_temporaries(tmp_root: Path) -> None:
    """Delete the temporaries under tmp_root whose writer is gone (its lock is free); nothing else."""
    for path in tmp_root.iterdir():
        if path.is_symlink() or not path.is_dir():
            continue
        marker = path / TMP_MARKER
        if marker.is_symlink() or not marker.is_file():
            log.debug("leaving %s in the cache's tmp/: not a marked trtpipe temporary", path)
            continue
        try:
            fd = os.open(marker, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            log.debug("removing the temporary of a dead writer %s", path)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
