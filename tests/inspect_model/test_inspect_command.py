"""`trtpipe inspect MODEL` / `trtpipe-inspect MODEL` through the real command line (a subprocess):
the text, `--json`, nothing written, and bad input as one line with exit 2.

Before this command, `trtpipe inspect m.onnx` was a Hydra override error ("missing EQUAL")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import run_command
from tests.inspect_model.inspected_models import write_everything_model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect")
    write_everything_model(folder / "m.onnx")
    return folder


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_trtpipe_inspect_prints_the_report_and_writes_nothing(workdir):
    before = _files(workdir)
    done = run_command(workdir, "inspect", "m.onnx")
    assert done.returncode == 0, done.stderr
    assert "trtpipe-inspect: m.onnx" in done.stdout and "com.example.Mystery" in done.stdout
    assert "what the stages would do (defaults; nothing runs)" in done.stdout
    assert _files(workdir) == before  # no cache, no outputs/, no run directory
    listed = run_command(workdir, "--help")
    assert "trtpipe inspect MODEL" in listed.stdout and "trtpipe reduce RUN_DIR" in listed.stdout


def test_json_is_the_report(workdir):
    done = run_command(workdir, "inspect", "m.onnx", "--json", "--tensorrt-version", "10.8")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"]["inputs"][0]["dynamic"] == ["batch"]
    assert report["stages"]["parser"]["tensorrt_version"].startswith("10.")
    assert report["stages"]["precision"]["integer_ranges_needed"] == ["step"]


@pytest.mark.parametrize("argument, problem", [
    ("missing.onnx", "missing.onnx does not exist"),
    (".", "is not a file"),
    ("notes.txt", "is not a valid ONNX protobuf"),
])
def test_bad_input_is_one_line_exit_2(workdir, argument, problem):
    (workdir / "notes.txt").write_text("not a model\n")
    before = _files(workdir)
    done = subprocess.run([sys.executable, "-m", "trtpipe.inspect_model", argument], cwd=workdir,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], done.stderr
    assert "Fix: give trtpipe-inspect the path of an .onnx file" in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == "" and _files(workdir) == before
