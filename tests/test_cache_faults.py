"""Faults in the cache's bookkeeping end cleanly (issue 22, item 9): a full disk, no permission
(another user's cache) or a symbolic-link loop at the marker, the source-digest memo and its
lock, or a key's lock is exit 2 with one line naming the file and a fix; never "internal error".

Each test reproduces a case that ended in exit 1 "internal error" before the fix."""

from __future__ import annotations

import ctypes
import json
import os
import resource
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe

SMALL = ["model.builtin=mixed_precision", "stages=[sanitize]"]


def assert_one_user_error_line(run, *needles: str) -> str:
    assert run.code == 2, run.stdout + run.stderr
    # Before any stage: `trtpipe: error: ...`; inside a stage: `  sanitize  failed  ...` (exit 2 as well).
    lines = [line for line in (run.stdout + run.stderr).strip().splitlines() if ". Fix: " in line]
    assert len(lines) == 1 and "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert ". Fix: " in lines[0]
    return lines[0]


def test_a_full_disk_when_the_marker_is_written_is_a_user_error(tmp_path):
    def files_of_16_bytes_at_most():  # Python ignores SIGXFSZ: the marker's write gets EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))

    run = run_trtpipe(tmp_path, *SMALL, "hydra.output_subdir=null", preexec_fn=files_of_16_bytes_at_most)
    assert_one_user_error_line(run, "TRTPIPE_CACHE.json", "File too large", "free space")
    assert not (tmp_path / "cache" / "TRTPIPE_CACHE.json").exists()


@pytest.mark.parametrize("where", ["memo lock", "key lock"])
def test_a_symlink_loop_at_a_lock_is_a_user_error(tmp_path, where):
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    cache = tmp_path / "cache"
    if where == "memo lock":  # a model the memo does not know yet, so its digest is written
        loop = cache / "index" / "source-digests-v2.json.lock"
        other = ["model.builtin=transformer"]
    else:  # a key not in the cache yet: its lock is taken
        key = run_trtpipe(tmp_path, *SMALL, "sanitize.toposort=false", cache=tmp_path / "elsewhere",
                          run_name="key").manifest["stages"][0]["key"]
        loop = cache / "locks" / f"{key}.lock"
        other = ["sanitize.toposort=false"]
    loop.unlink(missing_ok=True)
    loop.symlink_to(loop.name)  # points at itself
    run = run_trtpipe(tmp_path, *SMALL, *other, run_name="looped")
    line = assert_one_user_error_line(run, str(loop), "symbolic link")
    assert f"Fix: rm {loop}" in line
    loop.unlink()
    again = run_trtpipe(tmp_path, *SMALL, *other, run_name="again")  # the fix works
    assert again.code == 0, again.stderr


def _as_another_user():
    """Root without the capabilities that bypass file permissions (the sandbox has no second
    user that can run this Python): the cache's files, owned by uid 65534, are then as
    unwritable as another user's."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone after exec
            os._exit(99)


def test_another_users_cache_is_a_user_error_naming_the_file(tmp_path):
    """Reproduced: `PermissionError: [Errno 13] Permission denied: '.../locks/<key>.lock'`, exit 1."""
    if os.geteuid() != 0:
        pytest.skip("needs root to stand in for a second user")
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    cache = tmp_path / "cache"
    for path in [cache, *cache.rglob("*")]:
        os.chown(path, 65534, 65534, follow_symlinks=False)
    cache.chmod(0o777)  # the folder itself is shared; what is in it is the other user's (0755/0644)
    hit = run_trtpipe(tmp_path, *SMALL, run_name="hit", preexec_fn=_as_another_user)
    assert hit.code == 0, hit.stdout + hit.stderr  # reading another user's entries works
    miss = run_trtpipe(tmp_path, *SMALL, "sanitize.toposort=false", run_name="miss", preexec_fn=_as_another_user)
    assert miss.code != 99, "could not drop the capabilities"
    line = assert_one_user_error_line(miss, str(cache), "Permission denied", "TRTPIPE_CACHE")
    assert ".lock" in line or "source-digests" in line or "index" in line, line
    assert json.loads((cache / "TRTPIPE_CACHE.json").read_text())["tool"] == "trtpipe"


def test_a_shared_cache_locks_with_another_users_lock_file(tmp_path):
    """A team cache (folders writable by all) where another user created the key's lock file
    (0644): an flock needs no write access, so the run takes the lock through a read-only
    descriptor and computes the entry (it was `PermissionError ... .lock`, exit 1)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to stand in for a second user")
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    cache = tmp_path / "cache"
    key = run_trtpipe(tmp_path, *SMALL, "sanitize.toposort=false", cache=tmp_path / "elsewhere",
                      run_name="key").manifest["stages"][0]["key"]
    (cache / "locks" / f"{key}.lock").touch(mode=0o644)
    for path in [cache, *cache.rglob("*")]:
        os.chown(path, 65534, 65534, follow_symlinks=False)
        if path.is_dir():
            path.chmod(0o777)
    (cache / "locks" / f"{key}.lock").chmod(0o644)
    run = run_trtpipe(tmp_path, *SMALL, "sanitize.toposort=false", run_name="shared", preexec_fn=_as_another_user)
    assert run.code == 0, run.stdout + run.stderr
    assert run.statuses() == {"sanitize": "ran"}
