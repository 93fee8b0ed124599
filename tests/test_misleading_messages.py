"""Messages that name what is really wrong (issue 22, item 16), through the real command line.

Before: a data.path that is a folder, a FIFO or a link to /dev/zero was "does not exist";
another user's cache whose marker this user may not read was "not a trtpipe cache marker"."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe
from tests.external_model import DATA_OVERRIDE, weight_bytes, write_model


def one_line(run) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


@pytest.mark.parametrize("kind, expected", [
    ("folder", "is a folder with no .npz file in it"),  # a folder of .npz input sets is data (issue 30)
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("dev_zero", "is a device (a symbolic link to /dev/zero), not a regular file"),
    ("dangling", "is a symbolic link to"),
    ("missing", "does not exist"),
])
def test_a_data_path_that_is_not_a_file_says_what_it_is(tmp_path, kind, expected):
    model = write_model(tmp_path / "model", data=weight_bytes())
    data = tmp_path / "inputs.npz"
    if kind == "folder":
        data.mkdir()
    elif kind == "fifo":
        os.mkfifo(data)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", data)
    elif kind == "dangling":
        os.symlink(tmp_path / "gone.npz", data)
    run = run_trtpipe(tmp_path, "stages=[sanitize,upgrade_opset,precision]", f"model.path={model}",
                      f"data.path={data}", timeout=60)
    assert run.code == 2, run.stderr
    line = one_line(run)
    assert expected in line and str(data) in line, line
    if kind != "missing":
        assert "does not exist" not in line.replace("which does not exist", ""), line


def as_nobody():
    os.setgid(65534)
    os.setuid(65534)


def python_runs_for_others() -> bool:
    """Every folder above the interpreter lets others in (not so where Python lives under /root)."""
    path = Path(os.path.realpath(sys.executable))
    return all(os.stat(folder).st_mode & 0o001 for folder in path.parents)


def test_an_unreadable_marker_is_named_as_such_in_process(tmp_path, monkeypatch):
    """The same case as the next test, where a second user cannot run Python: a test double makes
    reading the marker fail with EACCES, what the kernel answers another user (umask 077)."""
    from trtpipe.cache.cache import ArtifactCache
    from trtpipe.cache.cache_dir import CACHE_MARKER
    from trtpipe.errors import UserError

    ArtifactCache(tmp_path / "cache")
    real_read_text = Path.read_text

    def denied(self, *args, **kwargs):
        if self.name == CACHE_MARKER:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(UserError) as raised:
        ArtifactCache(tmp_path / "cache")
    assert "cannot be read" in str(raised.value) and "not a trtpipe cache marker" not in str(raised.value)


@pytest.mark.skipif(os.geteuid() != 0 or not python_runs_for_others(),
                    reason="needs root to run a second user (setuid), and a Python that user may run")
def test_another_users_unreadable_marker_is_named_as_such():
    shared = Path(tempfile.mkdtemp(prefix="trtpipe-shared-", dir="/tmp"))
    try:
        shared.chmod(0o777)
        model = write_model(shared / "model", data=weight_bytes())
        for path in (shared / "model", model, shared / "model" / "w.bin"):
            path.chmod(0o777 if path.is_dir() else 0o644)
        cache = shared / "cache"
        first = run_trtpipe(shared, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache,
                            run_name="owner")
        assert first.code == 0, first.stderr
        for path in [cache, *cache.rglob("*")]:  # a shared, writable cache ...
            if path.is_dir():
                path.chmod(0o777)
        (cache / "TRTPIPE_CACHE.json").chmod(0o600)  # ... whose marker the owner wrote under umask 077
        (shared / "runs").chmod(0o777)
        home = {"HOME": str(shared), "XDG_CACHE_HOME": str(shared / "xdg"), "MPLCONFIGDIR": str(shared / "mpl")}
        run = run_trtpipe(shared, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache,
                          run_name="other", env=home, preexec_fn=as_nobody)
        assert run.code == 2, run.stderr
        line = one_line(run)
        assert "cannot be read" in line and "another user" in line, line
        assert "not a trtpipe cache marker" not in line
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_verify_with_an_unwritable_recorded_cache_gives_a_fix_verify_reads(tmp_path):
    """Before: "set cache.dir (or TRTPIPE_CACHE) to a writable directory", neither of which
    trtpipe-verify reads (it uses the manifest's recorded cache.dir)."""
    import subprocess

    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache)
    assert run.code == 0, run.stderr
    shutil.rmtree(cache)
    cache.write_text("a file where the cache was: no folder can be made there")
    verify = [str(Path(sys.executable).with_name("trtpipe-verify")), str(run.run_dir / "manifest.json"), "--use-cache"]
    done = subprocess.run(verify, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "elsewhere")})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(cache) in lines[0], done.stderr
    assert "TRTPIPE_CACHE" not in lines[0] and "cache.dir" not in lines[0].split("Fix:")[1], lines[0]
    assert "without --use-cache" in lines[0]
