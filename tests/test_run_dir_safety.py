"""A failed run never loses an earlier run's files in its run directory (issue 13, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

import trtpipe.api as api
from tests.cli_helpers import run_trtpipe

SMALL = ["model.builtin=mixed_precision", "stages=[sanitize]"]


def test_a_user_error_on_a_rerun_keeps_the_earlier_runs_log_and_hydra_dir(tmp_path):
    """Reproduced: `trtpipe model.path=/no/such.onnx hydra.run.dir=<existing run>` deleted the
    earlier run's trtpipe.log and .hydra/ (remove_run_leftovers removed them unconditionally)."""
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    log_before = (first.run_dir / "trtpipe.log").read_text()
    hydra_before = sorted(p.name for p in (first.run_dir / ".hydra").iterdir())
    assert log_before and hydra_before

    again = run_trtpipe(tmp_path, "model.path=/no/such.onnx")  # same run directory
    assert again.code == 2, again.stderr
    assert (first.run_dir / "trtpipe.log").read_text().startswith(log_before)
    assert sorted(p.name for p in (first.run_dir / ".hydra").iterdir()) == hydra_before
    assert (first.run_dir / "manifest.json").is_file()


def test_a_failed_rerun_leaves_the_earlier_runs_hydra_files_as_they_were(tmp_path):
    """Issue 22 item 7. Reproduced: after `trtpipe hydra.run.dir=X model.path=/nonexistent.onnx`
    (exit 2), X/.hydra/*.yaml held the failed run's settings and contradicted X/manifest.json."""
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    hydra_dir = first.run_dir / ".hydra"
    before = {p.name: p.read_bytes() for p in hydra_dir.iterdir()}
    for bad in (["model.path=/nonexistent.onnx"], ["data.path=/no/such.npz"]):  # errors before any stage
        again = run_trtpipe(tmp_path, *SMALL, *bad)
        assert again.code == 2, again.stderr
        assert {p.name: p.read_bytes() for p in hydra_dir.iterdir()} == before, bad
    assert "/nonexistent.onnx" not in (hydra_dir / "overrides.yaml").read_text()
    assert first.manifest["overrides"] == list(SMALL)


def test_a_user_error_into_a_new_run_dir_still_leaves_nothing(tmp_path):
    failed = run_trtpipe(tmp_path, "model.path=/no/such.onnx", run_name="fresh")
    assert failed.code == 2
    assert not failed.run_dir.exists()


def test_api_keeps_the_users_own_hydra_dir_on_a_user_error(tmp_path):
    """Reproduced: api.run(..., run_dir=d) with the user's own d/.hydra/ deleted it on a user error."""
    run_dir = tmp_path / "mine"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "notes.yaml").write_text("keep: me\n")
    (run_dir / "trtpipe.log").write_text("my earlier log\n")
    with pytest.raises(api.UserError):
        api.run(["model.path=/no/such.onnx", f"cache.dir={tmp_path / 'cache'}"], run_dir=run_dir, start_dir=tmp_path)
    assert (run_dir / ".hydra" / "notes.yaml").read_text() == "keep: me\n"
    assert (run_dir / "trtpipe.log").read_text().startswith("my earlier log\n")


def test_api_removes_what_it_created_on_a_user_error(tmp_path):
    run_dir = tmp_path / "new" / "run"
    with pytest.raises(api.UserError):
        api.run(["model.path=/no/such.onnx", f"cache.dir={tmp_path / 'cache'}"], run_dir=run_dir, start_dir=tmp_path)
    assert not run_dir.exists()


# --- Run-directory I/O errors (issue 13, item 8) ------------------------------------------


def assert_one_error_line(run, *needles: str) -> None:
    output = (run.stdout + run.stderr).strip()
    assert run.code == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, output
    for needle in needles:
        assert needle in errors[0], output
    assert "Fix: " in errors[0] and "hydra.run.dir" in errors[0], output


def test_a_file_where_the_run_directory_should_be_exits_2_naming_it(tmp_path):
    """Reproduced: hydra.run.dir=<file>/run ended in Hydra's NotADirectoryError traceback, exit 1."""
    (tmp_path / "afile").write_text("not a directory\n")
    run = run_trtpipe(tmp_path, *SMALL, run_name=str(tmp_path / "afile" / "run"))  # absolute: runs/ is dropped
    assert_one_error_line(run, str(tmp_path / "afile" / "run"))
    assert (tmp_path / "afile").read_text() == "not a directory\n"


def test_a_directory_where_the_log_file_should_be_exits_2_naming_it(tmp_path):
    """Reproduced: a directory named trtpipe.log in the run directory ended in Hydra's
    'Unable to configure handler' traceback (logging setup wrapping IsADirectoryError)."""
    (tmp_path / "runs" / "run" / "trtpipe.log").mkdir(parents=True)
    run = run_trtpipe(tmp_path, *SMALL)
    assert_one_error_line(run, str(run.run_dir / "trtpipe.log"), "Is a directory")
    assert sorted(p.name for p in run.run_dir.iterdir()) == ["trtpipe.log"]  # .hydra/ of this run removed


def _file_size_limit():
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # Python ignores SIGXFSZ: writes get EFBIG


def test_a_file_size_limit_while_hydra_writes_the_run_directory_exits_2(tmp_path):
    """Reproduced: `ulimit -f 1` (writes fail with EFBIG, like a full disk) while Hydra writes
    .hydra/config.yaml ended in an OSError traceback, exit 1."""
    run = run_trtpipe(tmp_path, *SMALL, run_name="limited", preexec_fn=_file_size_limit)
    assert_one_error_line(run, str(tmp_path / "runs" / "limited"), "File too large")
    assert not run.run_dir.exists()  # the half-written .hydra/ this run created is gone


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (needs mount permission: root in a privileged container), else skip."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_under_the_run_directory_exits_2_naming_the_path(tmp_path, tiny_tmpfs):
    """Reproduced: a run directory on a full disk (cache elsewhere) ended with
    `trtpipe: internal error: OSError: [Errno 28]`, exit 1, after a second error line."""
    warm = run_trtpipe(tmp_path, *SMALL, run_name="warm")  # the cache has the entry: only the run dir fills
    assert warm.code == 0, warm.stderr
    (tiny_tmpfs / "fill").write_bytes(b"\0" * 40 * 1024)
    run = run_trtpipe(tmp_path, *SMALL, run_name=str(tiny_tmpfs / "run"))
    assert_one_error_line(run, str(tiny_tmpfs / "run"), "No space left on device")
    assert not (tiny_tmpfs / "run").exists()  # what this run wrote is removed, which frees the space


def test_a_read_only_run_directory_exits_2_naming_it(tmp_path, tiny_tmpfs):
    """Reproduced: a run directory on a read-only file system ended in Hydra's OSError traceback."""
    import subprocess

    if subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True).returncode != 0:
        pytest.skip("cannot remount read-only")
    run = run_trtpipe(tmp_path, *SMALL, run_name=str(tiny_tmpfs / "run"))
    assert_one_error_line(run, str(tiny_tmpfs / "run"), "Read-only file system")
