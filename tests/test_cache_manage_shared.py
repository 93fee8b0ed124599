"""`trtpipe-cache` on a linked cache.dir and on another user's shared cache (issue 32, items 8
and 10), through the real command in subprocesses.

Another user: this machine's Python lives under /root (mode 0700), so a second uid cannot run
it (tests/test_misleading_messages.py skips there). Instead the cache is made another user's
(chowned to nobody) and trtpipe-cache runs as root without the capabilities that bypass file
permissions (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID dropped
from the bounding set before exec): to the kernel's permission checks, a user who is not the
owner, what a non-root user of a shared cache is."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import cache_entries, run_trtpipe

NOBODY = 65534
_PR_CAPBSET_DROP = 24
_FILE_CAPABILITIES = (0, 1, 2, 3, 4)  # CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID


def without_file_capabilities():
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _FILE_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_be_another_user() -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run([sys.executable, "-c", "import os; os.listdir('/proc/1/root')"], capture_output=True,
                          preexec_fn=without_file_capabilities)
    return done.returncode != 0  # without CAP_DAC_READ_SEARCH, pid 1's root is closed to us


def cache_cmd(*args: str, env_cache: Path | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"TRTPIPE_CACHE": str(env_cache)} if env_cache else {})}
    return subprocess.run([sys.executable, "-m", "trtpipe.cache_cli", *args], env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=preexec_fn)


def filled_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    run = run_trtpipe(tmp_path, "stages=[sanitize]", cache=cache)
    assert run.code == 0, run.stderr
    return cache


def test_a_linked_cache_dir_is_managed_at_its_target(tmp_path):
    """The layout docs/cache.md recommends ("link the whole cache.dir"), which runs accept.
    Before: exit 2 "is not a trtpipe cache ... Fix: pass --dir PATH", what was done."""
    cache = filled_cache(tmp_path)
    link = tmp_path / "cache-link"
    link.symlink_to(cache)
    assert run_trtpipe(tmp_path, "stages=[sanitize]", cache=link, run_name="linked").code == 0
    for args in (("info", "--dir", str(link)), ("prune", "--older-than", "9999d", "--dir", str(link))):
        done = cache_cmd(*args)
        assert done.returncode == 0 and "not a trtpipe cache" not in done.stderr, (args, done.stderr)
    info = cache_cmd("info", env_cache=link)
    assert info.returncode == 0 and "entries      1," in info.stdout, info.stdout
    done = cache_cmd("clear", "--dir", str(link))
    assert done.returncode == 0 and "deleted 1 entries" in done.stdout, done.stdout + done.stderr
    assert link.is_symlink() and cache_entries(cache) == [] and (cache / "TRTPIPE_CACHE.json").is_file()


@pytest.mark.skipif(not can_be_another_user(), reason="needs root that may drop its file capabilities")
def test_another_users_shared_cache_is_one_line_exit_2(tmp_path):
    """Before: clear and prune ended in a PermissionError traceback in tmp/, info in one when an
    entries/<stage> folder is unreadable; docs/cache.md promises one line, exit 2."""
    cache = filled_cache(tmp_path)
    for path in [cache, *cache.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    cache.chmod(0o1777)  # a shared cache's top folder; what is below keeps its owner's 0755/0644
    entries = cache_entries(cache)
    assert len(entries) == 1
    for args in (("clear",), ("prune", "--max-size", "1")):
        done = cache_cmd(*args, env_cache=cache, preexec_fn=without_file_capabilities)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1, (args, done.stderr)
        assert "keep you out" in lines[0] and "nobody" in lines[0] and "Fix: " in lines[0], lines[0]
        assert "nothing was deleted" in lines[0], lines[0]
        assert cache_entries(cache) == entries
    assert cache_cmd("info", env_cache=cache, preexec_fn=without_file_capabilities).returncode == 0
    stage_dir = entries[0].parent
    stage_dir.chmod(0o700)
    done = cache_cmd("info", env_cache=cache, preexec_fn=without_file_capabilities)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert f"cannot read the cache {cache}: {stage_dir} is nobody's" in lines[0], lines[0]
