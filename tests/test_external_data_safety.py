"""External data is read only from regular files inside the model's folder (issue 22, items 1, 10, 16).

Each case is a real model folder on disk run through the real command line. Before the fix
a linked data file was read and its bytes (a file outside the model's folder) were copied
into the cache and the run directory; a FIFO or /dev/zero was called "missing", an empty
location got the fix "put '' next to model.onnx", and a negative offset or a short length
ended in a traceback-class "ValueError"/"trtpipe defect" exit 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli_helpers import cache_entries, run_trtpipe
from tests.external_model import DATA_OVERRIDE, weight_bytes, write_model

SECRET_SEED = 99  # the outside file's bytes: they must never reach the cache or the run directory


def one_line(run) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr and "defect" not in run.stderr
    return lines[0]


def files_holding(root: Path, data: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and data in p.read_bytes()]


def refuse(tmp_path: Path, make) -> tuple[object, str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "w.bin"
    secret.write_bytes(weight_bytes(SECRET_SEED))
    folder = tmp_path / "model"
    folder.mkdir()
    location, link = make(folder, secret)
    model = write_model(folder, location=location, data=None)
    run = run_trtpipe(tmp_path, "stages=[sanitize,upgrade_opset,precision]", f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 2, run.stderr
    line = one_line(run)
    assert "'W'" in line and str(link) in line, line
    assert cache_entries(tmp_path / "cache") == []
    assert files_holding(tmp_path / "cache", secret.read_bytes()) == []
    assert not run.run_dir.exists() or files_holding(run.run_dir, secret.read_bytes()) == []
    return run, line


def test_a_symlinked_data_file_is_refused(tmp_path):
    def make(folder, secret):
        os.symlink(secret, folder / "w.bin")
        return "w.bin", folder / "w.bin"

    _, line = refuse(tmp_path, make)
    assert "symbolic link" in line


def test_a_data_file_under_a_symlinked_folder_is_refused(tmp_path):
    def make(folder, secret):
        os.symlink(secret.parent, folder / "sub")
        return "sub/w.bin", folder / "sub"

    _, line = refuse(tmp_path, make)
    assert "symbolic link" in line


def test_a_hard_linked_data_file_is_refused_with_a_fix_that_works(tmp_path):
    def make(folder, secret):
        os.link(secret, folder / "w.bin")
        return "w.bin", folder / "w.bin"

    run, line = refuse(tmp_path, make)
    assert "hard link" in line
    # The fix gives the model its own copy; pasted into a shell it makes the run pass.
    fix = line.split("Fix: give it a file of its own: ", 1)[1].rstrip(".")
    assert os.system(fix) == 0
    model = tmp_path / "model" / "model.onnx"
    again = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, run_name="again")
    assert again.code == 0, again.stderr
    assert (tmp_path / "outside" / "w.bin").stat().st_nlink == 1


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder"])
def test_a_data_file_that_is_not_a_regular_file_is_named_as_such(tmp_path, kind):
    """Before: 'w.bin', which is missing. Fix: put 'w.bin' next to model.onnx (it is there)."""
    folder = tmp_path / "model"
    model = write_model(folder, data=None)
    target = folder / "w.bin"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", target)
    else:
        target.mkdir()
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, timeout=60)
    assert run.code == 2, run.stderr
    line = one_line(run)
    assert "missing" not in line and "put 'w.bin'" not in line, line
    expected = {"fifo": "FIFO", "dev_zero": "symbolic link (to /dev/zero)", "folder": "a folder"}[kind]
    assert expected in line and "'W'" in line, line


@pytest.mark.parametrize("fields, expected", [
    ({"offset": "-8"}, "negative external-data offset (-8)"),
    ({"length": "-4"}, "negative external-data length (-4)"),
    ({"length": "100"}, "declares 100 bytes of external data, but its dims and type take 16384"),
    ({"offset": "abc"}, "offset 'abc', not a whole number"),
    ({"offset": "16000"}, "too short"),
    ({"location": "model.onnx"}, "names the model file itself"),
    ({"location": ""}, "names no file (empty location)"),
    ({"location": "."}, "names the model's folder ('.')"),  # was UnboundLocalError, exit 1 (bench/fuzz)
    ({"location": "sub/../w.bin"}, "outside the model's directory"),
])
def test_corrupt_external_data_fields_are_the_models_error(tmp_path, fields, expected):
    """Before: exit 1 'ValueError ... (traceback in log)', 'a trtpipe defect', or for an empty
    location the fix "put '' next to model.onnx"."""
    (tmp_path / "model" / "sub").mkdir(parents=True)
    model = write_model(tmp_path / "model", data=weight_bytes(), fields=fields)
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 2, run.stderr
    line = one_line(run)
    assert expected in line and "'W'" in line, line
    assert "put ''" not in line
    assert cache_entries(tmp_path / "cache") == []


def test_a_regular_data_file_still_runs(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    run = run_trtpipe(tmp_path, "stages=[sanitize,upgrade_opset,precision]", f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 0, run.stderr


def test_verify_of_a_model_whose_data_became_a_fifo_ends_in_one_line(tmp_path):
    """trtpipe-verify hashed the recorded model's external data before any check: a FIFO in
    its place made it wait forever for a writer."""
    import subprocess
    import sys

    model = write_model(tmp_path / "model", data=weight_bytes())
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 0, run.stderr
    (tmp_path / "model" / "w.bin").unlink()
    os.mkfifo(tmp_path / "model" / "w.bin")
    verify = [str(Path(sys.executable).with_name("trtpipe-verify")), str(run.run_dir / "manifest.json")]
    try:
        done = subprocess.run(verify, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("trtpipe-verify blocked on the FIFO")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FIFO" in done.stderr and "'W'" in done.stderr, done.stderr
