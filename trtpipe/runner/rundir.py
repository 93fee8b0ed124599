"""What a run directory held before the run, so a failed run removes only its own files.

Decisions:
- A run stopped by a user error removes what it created (Hydra's `.hydra/`, the log
  file, the directory itself when it was new) and nothing else: a rerun into an
  existing run directory (`hydra.run.dir=<existing>`, the API's `run_dir=`) keeps the
  earlier run's `trtpipe.log`, `.hydra/` and outputs.
- The command line takes the snapshot before Hydra creates anything: from an explicit
  `hydra.run.dir=` override in argv, or, for a run directory whose pattern contains
  `${now:...}` (the default), the directory is new when it holds only what Hydra just
  made (`.hydra/`, the log). A run directory
  known neither way (a fixed path set in a config file) is treated as pre-existing:
  nothing is removed from it.
- Hydra rewrites `.hydra/*.yaml` of an existing run directory before the run starts, so the
  snapshot also keeps those files' bytes (a few KiB of YAML) and a user error puts them back:
  they must go on describing the run whose `manifest.json` is there.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from trtpipe.errors import UserError

RUN_DIR_OVERRIDE = "hydra.run.dir="
HYDRA_DIR = ".hydra"
_KEPT_FILE_LIMIT = 1 << 20  # a bigger file in .hydra/ is not Hydra's: left as it is, not copied


@dataclass(frozen=True)
class RunDirSnapshot:
    run_dir: Path
    existed: bool
    names: frozenset[str] = field(default_factory=frozenset)  # top-level entries before the run
    # .hydra/'s entries before the run: (name, bytes), bytes None for one left as it is
    hydra_files: tuple[tuple[str, bytes | None], ...] = ()

    @classmethod
    def take(cls, run_dir: Path) -> "RunDirSnapshot":
        run_dir = Path(os.path.abspath(run_dir))
        try:
            if not run_dir.is_dir():
                return cls(run_dir, False)
            return cls(run_dir, True, frozenset(os.listdir(run_dir)), _hydra_files(run_dir / HYDRA_DIR))
        except OSError:  # unreadable: then nothing in it may be removed
            return cls.untouchable(run_dir)

    @classmethod
    def new(cls, run_dir: Path) -> "RunDirSnapshot":
        """A directory this run created (Hydra's default `${now:...}` run directory)."""
        return cls(Path(os.path.abspath(run_dir)), False)

    @classmethod
    def untouchable(cls, run_dir: Path) -> "RunDirSnapshot":
        """Unknown history: treat as the user's, remove nothing."""
        return cls(Path(os.path.abspath(run_dir)), True, frozenset({"*"}))

    def remove_new(self) -> None:
        """Remove the entries this run added; the directory too if this run created it and it is empty."""
        if "*" in self.names:
            return
        try:
            current = os.listdir(self.run_dir)
        except OSError:
            return
        self._restore_hydra_files()
        for name in current:
            if name in self.names:
                continue
            path = self.run_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except OSError:
                    pass
        if not self.existed:
            try:
                self.run_dir.rmdir()
            except OSError:
                pass


    def _restore_hydra_files(self) -> None:
        """`.hydra/` as it was: the earlier files' bytes back, the files this run added removed."""
        if HYDRA_DIR not in self.names:
            return
        hydra_dir = self.run_dir / HYDRA_DIR
        kept = dict(self.hydra_files)
        try:
            if hydra_dir.is_symlink() or not hydra_dir.is_dir():
                return
            for path in hydra_dir.iterdir():
                if path.name not in kept and path.is_file() and not path.is_symlink():
                    path.unlink()
            for name, data in kept.items():
                path = hydra_dir / name
                if data is None or path.is_symlink() or (path.exists() and path.read_bytes() == data):
                    continue
                path.write_bytes(data)
        except OSError:  # best effort: the run is failing with its own message already
            pass


def _hydra_files(hydra_dir: Path) -> tuple[tuple[str, bytes | None], ...]:
    """The entries of `.hydra/`, with the bytes of the small regular files (Hydra's config.yaml,
    hydra.yaml, overrides.yaml); anything else is named only, to be left alone."""
    if hydra_dir.is_symlink() or not hydra_dir.is_dir():
        return ()
    files = []
    for path in sorted(hydra_dir.iterdir()):
        small = path.is_file() and not path.is_symlink() and path.stat().st_size <= _KEPT_FILE_LIMIT
        files.append((path.name, path.read_bytes() if small else None))
    return tuple(files)


_taken: dict[Path, RunDirSnapshot] = {}


def start_directory() -> Path:
    """The directory trtpipe starts in (relative paths, the default run directory and a relative
    cache are taken from it).

    Decision (issue 32, item 7): a shell whose directory was deleted under it makes `getcwd` fail
    even when every path given is absolute; Hydra records the working directory of every run, so
    no run can start there. One line, exit 2, instead of a FileNotFoundError traceback."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        raise UserError("the current directory no longer exists (it was deleted after the shell entered it); "
                        "trtpipe takes relative paths, its run directory and Hydra's records from it",
                        'cd to an existing folder (cd "$HOME") and run the same command again') from None


def snapshot_from_argv(argv: list[str], cwd: Path) -> None:
    """Record the state of an explicit `hydra.run.dir=` before Hydra creates it (last one wins)."""
    values = [arg[len(RUN_DIR_OVERRIDE):] for arg in argv if arg.startswith(RUN_DIR_OVERRIDE)]
    if values and "${" not in values[-1]:
        path = Path(values[-1].strip("'\""))  # as Hydra takes it: no ~ expansion
        snapshot = RunDirSnapshot.take(path if path.is_absolute() else cwd / path)
        _taken[snapshot.run_dir] = snapshot


def snapshot_for(run_dir: Path, dir_pattern: str | None) -> RunDirSnapshot:
    """The snapshot taken before Hydra ran, else what the run directory's pattern implies."""
    run_dir = Path(os.path.abspath(run_dir))
    if run_dir in _taken:
        return _taken[run_dir]
    if dir_pattern and "${now:" in dir_pattern and _holds_only_hydras_own(run_dir):
        return RunDirSnapshot.new(run_dir)
    return RunDirSnapshot.untouchable(run_dir)


def _holds_only_hydras_own(run_dir: Path) -> bool:
    """Decision: a `${now:...}` directory is new only if it holds nothing but what Hydra just made
    (`.hydra/`, the log file): a pattern shared by several runs (`runs/${now:%Y-%m-%d}`, two runs
    in one second) may hold another run's files, and then nothing is removed."""
    try:
        return set(os.listdir(run_dir)) <= {".hydra", "trtpipe.log"}
    except OSError:
        return False


def explicit_snapshot() -> RunDirSnapshot | None:
    """The snapshot of the `hydra.run.dir=` given on the command line, if any."""
    return next(reversed(_taken.values()), None)


def run_dir_error(error: BaseException, run_dir: Path | None = None,
                  key: str = "hydra.run.dir") -> "UserError | None":
    """The one-line user error for an OSError (or Hydra's logging setup wrapping one) raised
    while Hydra creates the run directory, `.hydra/` or the log file; None for anything else.

    Decision: every OSError there is the user's to fix (a file where a directory is
    expected, a read-only or full disk, no permission): exit 2 naming the path."""
    import errno

    from trtpipe.errors import UserError

    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    path = os.path.abspath(cause.filename) if cause.filename else (run_dir or "the run directory")
    reason = os.strerror(cause.errno) if cause.errno else str(cause)
    elsewhere = f"{key}=outputs/{'multirun' if key == 'hydra.sweep.dir' else 'run'}"
    if cause.errno in (errno.ENOTDIR, errno.EEXIST):
        fix = f"a file is in the way: remove it or pass {elsewhere}"
    elif cause.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = f"free disk space there or pass {elsewhere} on a disk with room"
    else:
        fix = f"pass {elsewhere} (a writable directory)"
    return UserError(f"cannot write the run directory: {path}: {reason}", fix)
