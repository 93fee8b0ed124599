"""Which file holds an external tensor's bytes, and whether trtpipe may read it.

An ONNX model names its external data by a `location` relative to its folder.
A hostile or careless model folder can make that name reach any file: a
symbolic link (`w.bin -> /home/other/secret`), a file under a linked folder,
a hard link to a file with other names, a FIFO that blocks the reader, a
device (`/dev/zero`, endless), or the model file itself. Whatever trtpipe
reads is copied into its outputs, the cache and the run directory, so every
location is checked here before a byte is read (issue 22, item 1).

Decisions:
- The rules are onnx's own (onnx/checker.cc `resolve_external_data_location`
  and `open_external_data`, onnx >= 1.23), where trtpipe is not stricter: a
  location is refused when it is empty, absolute, is a symbolic link, lies
  outside the model's directory, is not a regular file (folder, FIFO, device,
  socket), or has more than one hard link.
- Stricter than onnx: `..` anywhere in the location as written (onnx refuses the
  substring after normalising, so `sub/../w.bin` passes there and `w..bin` does
  not; trtpipe refuses both); every folder between the model's directory and the
  file must be a real folder (onnx only checks that the resolved path stays
  inside: a link to a sibling folder passes there); and the model file itself
  is refused as its own data file (onnx reads its protobuf bytes as weights).
- `hard_links_ok=True` is for trtpipe's own files only: a verified cache entry
  whose untouched weights file is a hard link to its input entry's
  (`onnx_io.save_model(link_data_under=)`). A user's model folder is always
  checked without it (`trtpipe.source`, the runner's source snapshot).
- The final open uses O_NOFOLLOW | O_NONBLOCK and checks the descriptor again
  (`open_checked`): a link or FIFO swapped in after the check is refused there,
  and a FIFO never blocks the open.
- Offsets and lengths are checked as numbers (not integers, negative) and
  against the tensor (a length that does not match its size) and the file
  (bytes past its end): each is the model's error, one line, exit 2.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from trtpipe.errors import UserError

REEXPORT = "re-export the model with its external data file next to it (a regular file, not a link)"


def checked_data_file(base_dir: Path, location: str, tensor_name: str, model_path: Path,
                      hard_links_ok: bool = False) -> Path:
    """The absolute path of the regular file `location` names inside `base_dir`; UserError otherwise."""
    where = f"tensor {tensor_name!r} of model {model_path}"
    if not location:
        raise UserError(f"{where} keeps its data externally but names no file (empty location)", REEXPORT)
    # Stricter than onnx: `..` anywhere in the location as written, even where it normalizes away.
    if os.path.isabs(location) or ".." in location or "\0" in location:
        raise UserError(f"{where} names external data at {location!r}, outside the model's directory "
                        "(ONNX requires a relative path below it, without '..')", REEXPORT)
    base = Path(os.path.abspath(base_dir))
    parts = Path(os.path.normpath(location)).parts
    if not parts:  # "." or "./": the model's folder itself (found by bench/fuzz, kind fs)
        raise UserError(f"{where} names the model's folder ({location!r}) as its external data file, "
                        "not a file in it", REEXPORT)
    current = base
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            raise UserError(f"external data file {base / location} of {where} does not exist",
                            "copy it next to the model or re-export the model") from None
        except OSError as error:
            raise UserError(f"external data file {base / location} of {where} cannot be read "
                            f"({os.strerror(error.errno or 0)})", "check its permissions") from None
        last = index == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            what = "is a symbolic link" if last else f"lies under the symbolic link {current}"
            raise UserError(f"external data file {base / location} of {where} {what} "
                            f"(to {os.readlink(current)}); trtpipe reads external data only from regular "
                            "files inside the model's directory, as onnx and ONNX Runtime do", REEXPORT)
        if not last and not stat.S_ISDIR(info.st_mode):
            raise UserError(f"external data file {base / location} of {where} does not exist "
                            f"({current} is not a folder)", "copy it next to the model or re-export the model")
    refuse_unreadable_kind(info, base / location, where, hard_links_ok)
    model = os.stat(model_path) if os.path.exists(model_path) else None
    if model is not None and (model.st_dev, model.st_ino) == (info.st_dev, info.st_ino):
        raise UserError(f"{where} names the model file itself ({location!r}) as its external data file",
                        REEXPORT)
    resolved = Path(os.path.realpath(current))
    if not resolved.is_relative_to(Path(os.path.realpath(base))):  # defence in depth: no link was followed
        raise UserError(f"external data file {base / location} of {where} resolves outside the model's "
                        f"directory ({resolved})", REEXPORT)
    return current


def refuse_unreadable_kind(info: os.stat_result, path: Path, where: str, hard_links_ok: bool,
                           what: str = "external data file") -> None:
    """A folder, FIFO, device or socket, or a hard link (unless trtpipe's own): UserError."""
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{what} {path} of {where} is {file_kind(info.st_mode)}, not a regular file",
                        REEXPORT)
    if info.st_nlink > 1 and not hard_links_ok:
        copy = shlex.quote(str(path) + ".copy")
        raise UserError(f"{what} {path} of {where} is a hard link (the file has {info.st_nlink} "
                        "names); trtpipe, onnx and ONNX Runtime read external data only from files with one "
                        "name", f"give it a file of its own: cp {shlex.quote(str(path))} {copy} "
                        f"&& mv {copy} {shlex.quote(str(path))}")


def open_checked(path: Path, where: str, hard_links_ok: bool = False, what: str = "external data file") -> int:
    """A read-only descriptor of `path`, refused (UserError) if it is no longer what was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise UserError(f"{what} {path} of {where} cannot be opened "
                        f"({os.strerror(error.errno or 0)}; a symbolic link is refused)", REEXPORT) from None
    try:
        refuse_unreadable_kind(os.fstat(fd), path, where, hard_links_ok, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


_NO_LINKS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def descend_beneath(folder: int, parts: tuple[str, ...]) -> int:
    """A read-only descriptor of `parts` below the open folder `folder`, one level at a time, none of
    them a link (O_NOFOLLOW at each level; a FIFO opens without blocking). Raises OSError; the
    caller closes `folder` (the descriptors of the levels between are closed here)."""
    current = folder
    try:
        for part in parts[:-1]:
            inner = os.open(part, _NO_LINKS | os.O_DIRECTORY, dir_fd=current)
            if current != folder:
                os.close(current)
            current = inner
        return os.open(parts[-1], _NO_LINKS | os.O_NONBLOCK, dir_fd=current)
    finally:
        if current != folder:
            os.close(current)


def open_beneath(base_dir: Path, location: str, where: str) -> int:
    """A read-only descriptor of `location` opened one folder at a time from `base_dir`, each
    level with O_NOFOLLOW (as onnx's openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a folder
    swapped for a link after `checked_data_file` cannot lead the read elsewhere. Checked
    like `open_checked` (a regular file with one name)."""
    parts = Path(os.path.normpath(location)).parts
    folder = os.open(base_dir, _NO_LINKS | os.O_DIRECTORY)
    try:
        fd = descend_beneath(folder, parts)
    except OSError as error:
        raise UserError(f"external data file {Path(base_dir) / location} of {where} cannot be opened "
                        f"({os.strerror(error.errno or 0)}; a symbolic link is refused)", REEXPORT) from None
    finally:
        os.close(folder)
    try:
        refuse_unreadable_kind(os.fstat(fd), Path(base_dir) / location, where, hard_links_ok=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def checked_span(offset: object, length: object, needed: int | None, file_size: int, path: Path,
                 where: str) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes, as numbers the file and the tensor agree with; UserError otherwise.

    `needed`: the tensor's size in bytes from its dims and type (None when it cannot be told: strings)."""
    values = {}
    for name, value, default in (("offset", offset, 0), ("length", length, needed)):
        if value is None:
            values[name] = default
            continue
        try:
            values[name] = int(value)
        except (TypeError, ValueError):
            raise UserError(f"{where} has the external-data {name} {value!r}, not a whole number", REEXPORT) from None
        if values[name] < 0:
            raise UserError(f"{where} has a negative external-data {name} ({values[name]})", REEXPORT)
    start = values["offset"]
    count = values["length"] if values["length"] is not None else file_size - start
    if needed is not None and count != needed:
        raise UserError(f"{where} declares {count} bytes of external data, but its dims and type take {needed}",
                        REEXPORT)
    if start + count > file_size:
        raise UserError(f"external data file {path} of {where} is too short for it (needs bytes "
                        f"{start}-{start + count}, has {file_size})",
                        "re-export the model; the data file is truncated or belongs to another export")
    return start, count


def file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"
