"""Real runs of the real command for the `fs` and `sweep` fuzz kinds (issue 22, "Done when"),
and the oracles they share.

Decisions:
- Each case runs `python -m trtpipe` in a subprocess from its own working directory, with
  its own cache and run directory under it: what is judged is what a user's shell sees (exit
  code, stderr lines) and what lands on disk, never an in-process shortcut.
- A defect is `Defect(category, text)`: the category is the mutation's name (so counts map to
  the issue's numbered items, bench/fuzz/fuzz_fs.py ITEMS), the text says which oracle broke.
- Oracles (each a precise property, a violation is a defect):
  * `user_error`: exit 2, exactly one non-empty stderr line, no `Traceback`, no "internal error"
    or "trtpipe defect" (the user's fault is never blamed on trtpipe), and, when the path the
    line is about exists, no "does not exist"/"missing"/"not found" (item 16).
  * `success`: exit 0 (controls: a legitimate variation must keep working).
  * `nothing_outside`: no file, link or folder in the case's working directory outside the
    allowed folders (cache, run directories) appears, disappears or changes (size, mtime,
    inode, link target, mode).
  * `no_secret`: the bytes of a file outside the model folder never appear in any file of
    the cache or a run directory.
  * `cache_ok`: every entry's record and digests verify, no temporary is left
    (bench/fuzz/fuzz_cases.cache_problems), and no entry is a link.
  * A hang (no exit within the case's timeout) is a defect of its own.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 120.0
BLAME_TRTPIPE = ("internal error", "trtpipe defect", "please report", "traceback in")
NOT_THERE = ("does not exist", "missing", "not found", "no such file")


@dataclass
class Defect:
    category: str
    text: str

    def __str__(self) -> str:
        return f"{self.category}: {self.text}"


@dataclass
class Outcome:
    code: int | None  # None: killed after the timeout (a hang)
    stdout: str
    stderr: str
    seconds: float

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def environment(cache: Path | str | None, extra: dict | None = None) -> dict:
    env = {**os.environ, **(extra or {})}
    env.pop("TRTPIPE_DEBUG", None)
    if cache is not None:
        env["TRTPIPE_CACHE"] = str(cache)
    return env


def run_cli(cwd: Path, overrides: list[str], cache: Path | str | None, env: dict | None = None,
            timeout: float = TIMEOUT, preexec_fn=None, watch=None) -> Outcome:
    """`python -m trtpipe OVERRIDES` from `cwd` in its own session; `watch(process)` (optional)
    is called every 50 ms while it runs (to kill a worker, send a signal...)."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe", *overrides], cwd=cwd, env=environment(cache, env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=preexec_fn)
    if watch is None:
        try:
            out, err = process.communicate(timeout=timeout)
            return Outcome(process.returncode, out, err, time.perf_counter() - start)
        except subprocess.TimeoutExpired:
            return _hung(process, start)
    while process.poll() is None:
        if time.perf_counter() - start > timeout:
            return _hung(process, start)
        watch(process)
        time.sleep(0.05)
    out, err = process.communicate()
    return Outcome(process.returncode, out, err, time.perf_counter() - start)


def _hung(process: subprocess.Popen, start: float) -> Outcome:
    os.killpg(process.pid, signal.SIGKILL)
    out, err = process.communicate()
    return Outcome(None, out, err, time.perf_counter() - start)


# -- oracles ----------------------------------------------------------------------------------------

def user_error(outcome: Outcome, about: Path | None = None) -> str | None:
    """Why `outcome` is not a clean user error (exit 2, one line, the user's fault, not misleading)."""
    if outcome.code is None:
        return f"hang: no exit within {outcome.seconds:.0f} s"
    lines = outcome.lines()
    shown = " | ".join(lines)[:300]
    if "Traceback" in outcome.stderr:
        return f"exit {outcome.code} with a traceback: {shown}"
    if outcome.code != 2:
        return f"exit {outcome.code} instead of 2: {shown}"
    if len(lines) != 1:
        return f"{len(lines)} stderr lines instead of 1: {shown}"
    if any(word in lines[0].lower() for word in BLAME_TRTPIPE):
        return f"the user's error is blamed on trtpipe: {shown}"
    if about is not None and os.path.lexists(about) and any(w in lines[0].lower() for w in NOT_THERE):
        return f"says the existing {about.name} is not there: {shown}"
    if "''" in lines[0] or '""' in lines[0]:
        return f"names an empty path: {shown}"
    return None


def success(outcome: Outcome) -> str | None:
    if outcome.code is None:
        return f"hang: no exit within {outcome.seconds:.0f} s"
    if outcome.code != 0:
        return f"a legitimate run ended {outcome.code}: {' | '.join(outcome.lines())[:300]}"
    return None


def clean_or_user_error(outcome: Outcome) -> str | None:
    """Either works (exit 0) or refuses cleanly (exit 2, one line): for mutations where both are right."""
    return None if outcome.code == 0 else user_error(outcome)


def tree(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Every file, link and folder under `root` (not under `skip`), with what identifies its state."""
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            path = here / name
            if path in skip:
                continue
            info = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
            size_time = (info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else (0, 0)
            found[str(path)] = (info.st_mode, info.st_ino, target, *size_time)
    return found


def nothing_outside(before: dict, after: dict) -> str | None:
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if not changed:
        return None
    what = ["created " if p not in before else "deleted " if p not in after else "changed " for p in changed]
    return "outside the cache and run directory: " + ", ".join(w + p for w, p in zip(what, changed))[:300]


def regular_files(root: Path):
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield path


def no_secret(secret: bytes, roots: list[Path]) -> str | None:
    for root in roots:
        for path in regular_files(root) if root.is_dir() else ():
            try:
                if secret in path.read_bytes():
                    return f"bytes of a file outside the model folder were copied into {path}"
            except OSError:
                continue
    return None


def cache_ok(cache: Path, killed: bool = False) -> str | None:
    """`killed`: a writer was killed, so its temporary may stay until the next run removes it (README)."""
    from bench.fuzz.fuzz_cases import cache_problems

    if not cache.is_dir() or cache.is_symlink():
        return None
    entries = cache / "entries"
    if entries.is_dir() and not entries.is_symlink():
        for stage in entries.iterdir():
            for entry in stage.iterdir() if stage.is_dir() and not stage.is_symlink() else ():
                if entry.is_symlink():
                    return f"the cache entry {entry} is a link"
    try:
        problem = cache_problems(cache)
        # A linked tmp/ is refused and left alone: what lies behind it is not the cache's.
        foreign = (cache / "tmp").is_symlink() or killed
        return None if foreign and problem and problem.startswith("temporaries left") else problem
    except OSError as error:
        return f"the cache does not verify: {error}"
