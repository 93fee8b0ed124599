"""Whether a recorded run can be compared at all: its manifest complete, its files its own.

`trtpipe-verify` compares a rebuild with a manifest. That comparison proves something only
when the manifest records every stage its config asks for and the run directory's files are
the ones whose sha256 it records (issue 32, items 1 and 3). Each problem here is one
UserError line (exit 2), found before anything is rebuilt, never a verdict.

Decisions:
- Complete: the stage records are exactly the config's `stages`, in that order. The runner
  writes one record per planned stage (`skipped` and `interrupted` included), so an emptied
  list, a removed, added or reordered record is an edited manifest, not a partial run.
- Files: each output path is relative and stays inside the run directory (no `..`, no
  absolute path), every folder on the way is a real folder and the file a regular file,
  each opened without following a symbolic link (the runner never writes one: hard links
  and copies only, cache/publish.py),
  without blocking (a FIFO). Its digest is `artifact_digest`'s, the one the manifest
  records (an ONNX file's external data files included, themselves checked the same way).
- Outcome: the run's `status` and `exit_code` are recorded, of the kinds the runner writes
  (every manifest since the exit code was recorded, format 1). Verify compares them with the
  rebuild's; a manifest without them was edited to skip that comparison (issue 32: a failed
  run edited to `ok` said `identical`), so it is refused, not compared in part.
- A file that is absent is a note, not a refusal: a manifest copied alone, or a run
  directory whose engine was deleted for space, still verifies against its recorded
  digests, and the note says which files were not checked. A file that is there and
  differs, or a path that leads elsewhere, makes the run directory untrustworthy.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from trtpipe.cache.hashing import artifact_digest, external_data_locations, sha256_file
from trtpipe.errors import UserError

_REBUILT_FIX = "verify the manifest.json the run wrote, unedited (or rerun the recorded command for a new one)"
_FILES_FIX = ("verify an untouched copy of the run directory, or its manifest.json alone "
              "(its recorded digests are then compared with the rebuild's)")


def check_complete(manifest: dict, planned: list[str], path: Path) -> None:
    """The manifest's stage records name exactly the stages its config plans, in order."""
    recorded = [stage["name"] for stage in manifest["stages"]]
    if recorded == planned:
        return
    missing = [name for name in planned if name not in recorded]
    extra = [name for name in recorded if name not in planned]
    if missing:
        why = f"it records no {', '.join(missing)} stage that its config's stages {planned} ask for"
    elif extra:
        why = f"it records {', '.join(extra)}, which its config's stages {planned} do not list"
    else:
        why = f"its stage records {recorded} are not in its config's order {planned}"
    raise UserError(f"manifest {path} is incomplete or edited: {why}", _REBUILT_FIX)


# What the runner writes as a run's status (runner/pipeline.py) and the exit code each ends with.
_OUTCOMES = {"ok": (0,), "failed": (1, 2), "interrupted": (130, 143), "running": (None,)}


def check_outcome(manifest: dict, path: Path) -> None:
    """The manifest records the run's status and exit code, and they agree with each other."""
    missing = [key for key in ("status", "exit_code") if key not in manifest]
    if missing:
        why = f"it records no {' and no '.join(missing)}"
    elif not isinstance(manifest["status"], str) or manifest["status"] not in _OUTCOMES:
        why = f"its status {str(manifest['status'])[:40]!r} is not one of {', '.join(_OUTCOMES)}"
    elif manifest["exit_code"] not in _OUTCOMES[manifest["status"]] or isinstance(manifest["exit_code"], bool):
        why = f"status {manifest['status']} with exit_code {str(manifest['exit_code'])[:20]} is not an ending trtpipe writes"
    else:
        return
    raise UserError(f"manifest {path} is incomplete or edited: {why}", _REBUILT_FIX)


def check_run_files(manifest: dict, run_dir: Path) -> str | None:
    """Every output file the manifest names that is in `run_dir` has its recorded sha256.

    Returns a note naming the files that are absent, or None."""
    absent: list[str] = []
    seen: dict[str, str] = {}
    for stage in manifest["stages"]:
        for output in (stage.get("outputs") or {}).values():
            name, recorded = output["path"], output["sha256"]
            if seen.get(name) == recorded:
                continue
            seen[name] = recorded
            digest = _digest_beneath(run_dir, _inside_parts(name, run_dir), name, recorded)
            if digest is None:
                absent.append(name)
            elif digest != recorded:
                raise UserError(f"run directory {run_dir} cannot be trusted: {name} is not the file its manifest "
                                f"records (sha256 {digest[:12]}…, recorded {recorded[:12]}…)", _FILES_FIX)
    if not absent:
        return None
    if len(absent) == len(seen):
        return (f"none of the {len(absent)} files the manifest names is in {run_dir} (a manifest on its own): "
                "only their recorded digests were compared with the rebuild's")
    shown = ", ".join(absent[:3]) + (f" (+{len(absent) - 3} more)" if len(absent) > 3 else "")
    return f"{shown} not in the run directory: only their recorded digests were compared with the rebuild's"


def _inside_parts(name: str, run_dir: Path) -> tuple[str, ...]:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\0" in name:
        raise UserError(f"run directory {run_dir} cannot be trusted: its manifest names the file {name!r}, "
                        "which is not a path inside the run directory", _FILES_FIX)
    return tuple(part for part in path.parts if part != ".")


def _digest_beneath(run_dir: Path, parts: tuple[str, ...], name: str, recorded: str | None) -> str | None:
    """`artifact_digest` of run_dir/name opened one level at a time; None when it is absent.

    A model's digest covers its external data files: only a model whose own bytes are not the
    recorded digest is parsed for them (a model without external data is digested as a file)."""
    fd = _open_beneath(run_dir, parts, name)
    if fd is None:
        return None
    try:
        opened = _opened(fd, run_dir.joinpath(*parts))
        own = sha256_file(opened)
        if own == recorded or not name.endswith(".onnx"):
            return own
        locations = _locations(opened, run_dir, name)
    finally:
        os.close(fd)
    if not locations:
        return own
    known = {parts[-1]: own}
    for location in locations:
        where = f"{name}'s external data {location!r}"
        if "/" in location or "\\" in location or location in ("", ".", ".."):
            raise UserError(f"run directory {run_dir} cannot be trusted: {where} is not a file next to it",
                            _FILES_FIX)
        data = _digest_beneath(run_dir, (*parts[:-1], location), where, None)
        if data is None:
            raise UserError(f"run directory {run_dir} cannot be trusted: {where} is missing", _FILES_FIX)
        known[location] = data
    return artifact_digest(run_dir.joinpath(*parts), known=known, locations=locations)


def _locations(opened: Path, run_dir: Path, name: str) -> list[str]:
    try:
        return external_data_locations(opened)
    except Exception as error:  # noqa: BLE001 - any parser error: it is not the recorded model
        raise UserError(f"run directory {run_dir} cannot be trusted: {name} cannot be read as ONNX "
                        f"({type(error).__name__})", _FILES_FIX) from None


def _opened(fd: int, path: Path) -> Path:
    """The checked descriptor's file by a name no one can swap (/proc on Linux), else its path."""
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.exists() else path


def _open_beneath(run_dir: Path, parts: tuple[str, ...], name: str) -> int | None:
    """A read-only descriptor of a regular file under `run_dir`, no link followed; None if absent."""
    from trtpipe.onnxmodel.external_files import descend_beneath

    try:
        folder = os.open(run_dir, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY)
    except OSError as error:
        raise UserError(f"run directory {run_dir} cannot be read ({os.strerror(error.errno or 0)})",
                        _FILES_FIX) from None
    try:
        fd = descend_beneath(folder, parts)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: a link; ENOTDIR: a folder on the way is a link or a file
        raise UserError(f"run directory {run_dir} cannot be trusted: {name} cannot be opened as the file the run "
                        f"wrote ({os.strerror(error.errno or 0)}; a symbolic link is refused)", _FILES_FIX) from None
    finally:
        os.close(folder)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        from trtpipe.onnxmodel.external_files import file_kind

        os.close(fd)
        raise UserError(f"run directory {run_dir} cannot be trusted: {name} is {file_kind(mode)}, "
                        "not the file the run wrote", _FILES_FIX)
    return fd

