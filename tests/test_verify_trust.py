"""`trtpipe-verify` cannot be fooled by a manifest or run directory (issue 32, items 1, 2, 3, 14).

Verify says `identical` only when the manifest is complete for the stages its config asks
for, every file it names in the run directory has its recorded sha256, and the rebuild's
outcome (each stage's status, the run's status and exit code) is the recorded one. A
manifest or run directory that cannot be trusted is exit 2 with one line, nothing rebuilt.

Every test runs the real `trtpipe-verify` console script in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.test_verify_cleanup import small_model as _small_model, trtpipe_verify


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A passing run of a small user model: (workdir, run directory)."""
    workdir = tmp_path_factory.mktemp("verify-trust")
    _small_model(workdir / "mm.onnx")
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=mm.onnx")
    assert run.code == 0, run.stdout + run.stderr
    return workdir, run.run_dir


@pytest.fixture(scope="module")
def failed(tmp_path_factory):
    """A run that fails validation by design (naive_fp16 on the built-in transformer)."""
    workdir = tmp_path_factory.mktemp("verify-trust-failed")
    run = run_trtpipe(workdir, "+recipe=naive_fp16", "precision.repair=false",
                      "stages=[sanitize,precision,validate]")
    assert run.code == 1, run.stdout + run.stderr
    return workdir, run.run_dir


def _scratch(tmp_path: Path) -> Path:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return scratch


def _copy_run(run_dir: Path, tmp_path: Path) -> Path:
    copied = tmp_path / "copy" / "run"
    shutil.copytree(run_dir, copied)
    return copied


def _edit_manifest(run_dir: Path, edit) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    edit(manifest)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _refused_in_one_line(done: subprocess.CompletedProcess, scratch: Path) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trtpipe-verify: error: "), done.stderr[-2000:]
    assert "Fix:" in lines[0] and done.stdout == "" and "identical" not in lines[0]
    assert not list(scratch.glob("trtpipe-verify-*")), "an untrustworthy run must not start a rebuild"
    return lines[0]


def _drop_stage(name):
    def edit(manifest):
        manifest["stages"] = [s for s in manifest["stages"] if s["name"] != name]
    return edit


INCOMPLETE = {
    "stages emptied": lambda m: m.update(stages=[]),
    "validate record removed": _drop_stage("validate"),
    "a middle record removed": _drop_stage("precision"),
    "records in another order": lambda m: m["stages"].reverse(),
    "a record the config does not ask for": lambda m: m["config"].update(
        stages=[s for s in m["config"]["stages"] if s != "validate"]),
    # Session 11: without these two keys the run's outcome was not compared (identical, exit 0).
    "the run's status removed": lambda m: m.pop("status"),
    "the run's exit code removed": lambda m: m.pop("exit_code"),
    "an exit code its status never has": lambda m: m.update(exit_code=1),
    "a status the runner never writes": lambda m: m.update(status="passed"),
    "a status that is a list": lambda m: m.update(status=[1, 2]),  # found by the verify fuzz: a TypeError
}


@pytest.mark.parametrize("case", list(INCOMPLETE))
def test_an_incomplete_manifest_is_refused(recorded, tmp_path, case):
    """Item 1, reproduced: an emptied `stages` list or a removed validate record verified
    `identical`, exit 0: nothing, or part, of the run was compared."""
    workdir, run_dir = recorded
    copied = _copy_run(run_dir, tmp_path)
    _edit_manifest(copied, INCOMPLETE[case])
    scratch = _scratch(tmp_path)
    line = _refused_in_one_line(trtpipe_verify(copied, cwd=workdir, tmpdir=scratch), scratch)
    assert "incomplete" in line or "does not match" in line, line


def test_an_edited_outcome_is_not_identical(failed, tmp_path):
    """Item 2, reproduced: a run that failed validation, its manifest edited to `status: ok`,
    exit 0 and validate `ran`, verified "identical ... including its failed validate", exit 0:
    the recorded outcome was never compared with the rebuild's."""
    workdir, run_dir = failed
    copied = _copy_run(run_dir, tmp_path)

    def edit(manifest):
        manifest.update(status="ok", exit_code=0)
        validate = next(s for s in manifest["stages"] if s["name"] == "validate")
        validate.update(status="ran", error=None)

    _edit_manifest(copied, edit)
    scratch = _scratch(tmp_path)
    done = trtpipe_verify(copied, cwd=workdir, tmpdir=scratch)
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert "DRIFTED" in last and "identical" not in last, done.stdout
    validate_line = next(line for line in done.stdout.splitlines() if line.strip().startswith("validate"))
    assert "drifted" in validate_line and "recorded ran, rebuild failed" in validate_line, validate_line
    verdict = json.loads(trtpipe_verify(copied, "--json", cwd=workdir, tmpdir=scratch).stdout)
    assert not verdict["identical"] and verdict["failed_in_both"] == []
    assert verdict["outcome"]["recorded"] == {"status": "ok", "exit_code": 0}
    assert verdict["outcome"]["rebuild"] == {"status": "failed", "exit_code": 1}


def test_an_edited_run_status_alone_is_not_identical(failed, tmp_path):
    """Item 2: the run's own status and exit code are part of the outcome too."""
    workdir, run_dir = failed
    copied = _copy_run(run_dir, tmp_path)
    _edit_manifest(copied, lambda m: m.update(status="ok", exit_code=0))
    done = trtpipe_verify(copied, cwd=workdir, tmpdir=_scratch(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DRIFTED" in done.stdout.splitlines()[-1]
    assert any(line.split()[:2] == ["run", "drifted"] for line in done.stdout.splitlines()), done.stdout


def test_an_unedited_failed_run_still_verifies_identical(failed, tmp_path):
    """The control: the same failure reproduced is identical (issue 24, item 7), with the
    run directory's files checked."""
    workdir, run_dir = failed
    done = trtpipe_verify(run_dir, cwd=workdir, tmpdir=_scratch(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "including its failed validate" in done.stdout.splitlines()[-1]


def _change_a_weight(path: Path) -> None:
    model = onnx.load(str(path))
    weight = model.graph.initializer[0]
    array = numpy_helper.to_array(weight).copy()
    array.flat[0] += 1
    weight.CopyFrom(numpy_helper.from_array(array, weight.name))
    onnx.save(model, str(path))


def _swap_plan(run_dir: Path) -> None:
    shutil.copyfile(run_dir / "sanitize" / "model.onnx", run_dir / "precision" / "precision_plan.json")


def _outside(run_dir: Path) -> None:
    _edit_manifest(run_dir, lambda m: m["stages"][0]["outputs"]["model"].update(path="../../mm.onnx"))


def _absolute(run_dir: Path) -> None:
    target = str(run_dir / "sanitize" / "model.onnx")
    _edit_manifest(run_dir, lambda m: m["stages"][0]["outputs"]["model"].update(path=target))


def _linked(run_dir: Path) -> None:
    """A symbolic link to a copy of the same bytes outside the run directory."""
    model = run_dir / "precision" / "model.onnx"
    outside = run_dir.parent / "elsewhere.onnx"
    shutil.copyfile(model, outside)
    model.unlink()
    model.symlink_to(outside)


def _fifo(run_dir: Path) -> None:
    plan = run_dir / "precision" / "precision_plan.json"
    plan.unlink()
    os.mkfifo(plan)


def _folder(run_dir: Path) -> None:
    report = run_dir / "validate" / "validation.json"
    report.unlink()
    report.mkdir()


UNTRUSTED_FILES = {
    "a weight changed": (lambda d: _change_a_weight(d / "precision" / "model.onnx"), "precision/model.onnx"),
    "a file swapped for another": (_swap_plan, "precision/precision_plan.json"),
    "a path outside the run directory": (_outside, "../../mm.onnx"),
    "an absolute path": (_absolute, "sanitize/model.onnx"),
    "a symbolic link": (_linked, "precision/model.onnx"),
    "a FIFO": (_fifo, "precision/precision_plan.json"),
    "a folder": (_folder, "validate/validation.json"),
}


@pytest.mark.parametrize("case", list(UNTRUSTED_FILES))
def test_a_run_directory_whose_files_are_not_the_recorded_ones_is_refused(recorded, tmp_path, case):
    """Item 3, reproduced: `trtpipe-verify RUN_DIR` said `identical` after a weight in
    RUN_DIR/precision/model.onnx was changed: the run directory's files were never checked
    against the manifest's sha256s."""
    workdir, run_dir = recorded
    copied = _copy_run(run_dir, tmp_path)
    mutate, named = UNTRUSTED_FILES[case]
    mutate(copied)
    scratch = _scratch(tmp_path)
    line = _refused_in_one_line(trtpipe_verify(copied, cwd=workdir, tmpdir=scratch), scratch)
    assert named in line, line


def test_a_run_directory_missing_a_file_says_so(recorded, tmp_path):
    """An absent file is a note (a manifest copied alone, an engine deleted for space): the
    rebuild is still compared with the recorded digests."""
    workdir, run_dir = recorded
    copied = _copy_run(run_dir, tmp_path)
    (copied / "precision" / "model.onnx").unlink()
    done = trtpipe_verify(copied, cwd=workdir, tmpdir=_scratch(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "precision/model.onnx" in done.stderr and "not in the run directory" in done.stderr


@pytest.mark.parametrize("kind", ["folder", "FIFO", "/dev/zero"])
def test_verify_model_that_exists_but_is_not_a_file(recorded, tmp_path, kind):
    """Item 14, reproduced: `--model` given an existing folder, FIFO or /dev/zero said "the
    recorded model ... does not exist" (docs/reliability.md: never for a path that exists)."""
    workdir, run_dir = recorded
    if kind == "folder":
        model = tmp_path / "models"
        model.mkdir()
    elif kind == "FIFO":
        model = tmp_path / "model.onnx"
        os.mkfifo(model)
    else:
        model = Path("/dev/zero")
    scratch = _scratch(tmp_path)
    line = _refused_in_one_line(trtpipe_verify(run_dir, "--model", str(model), cwd=workdir, tmpdir=scratch),
                                scratch)
    assert "does not exist" not in line and str(model) in line and "not a file" in line, line
    assert "--model" in line


def test_verify_model_that_does_not_exist_still_says_so(recorded, tmp_path):
    workdir, run_dir = recorded
    scratch = _scratch(tmp_path)
    line = _refused_in_one_line(trtpipe_verify(run_dir, "--model", str(tmp_path / "gone.onnx"), cwd=workdir,
                                               tmpdir=scratch), scratch)
    assert "does not exist" in line


def test_an_intact_copy_of_the_run_directory_verifies(recorded, tmp_path):
    """The control of the file checks: an untouched copy is identical, no note."""
    workdir, run_dir = recorded
    done = trtpipe_verify(_copy_run(run_dir, tmp_path), cwd=workdir, tmpdir=_scratch(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not in the run directory" not in done.stderr
    assert done.stdout.splitlines()[-1].startswith("trtpipe-verify: identical")



def test_a_model_with_external_data_is_checked_with_its_data_file(tmp_path):
    """The run directory's digest of a model is `artifact_digest`'s (its external data file
    included, opened beneath the run directory); a changed data file is refused. In-process:
    stage outputs hold external data only past protobuf's 2 GiB limit."""
    from trtpipe.cache.hashing import artifact_digest
    from trtpipe.errors import UserError
    from trtpipe.runner.manifest_trust import check_run_files

    stage_dir = tmp_path / "run" / "precision"
    stage_dir.mkdir(parents=True)
    _small_model(tmp_path / "mm.onnx")
    model = onnx.load(str(tmp_path / "mm.onnx"))
    onnx.save(model, str(stage_dir / "model.onnx"), save_as_external_data=True, location="model.data",
              size_threshold=0)
    manifest = {"stages": [{"name": "precision", "outputs": {"model": {
        "path": "precision/model.onnx", "sha256": artifact_digest(stage_dir / "model.onnx")}}}]}
    assert check_run_files(manifest, tmp_path / "run") is None
    data = stage_dir / "model.data"
    data.write_bytes(bytes(reversed(data.read_bytes())))
    with pytest.raises(UserError, match="precision/model.onnx is not the file its manifest records"):
        check_run_files(manifest, tmp_path / "run")
    data.unlink()
    data.symlink_to(tmp_path / "mm.onnx")
    with pytest.raises(UserError, match="a symbolic link is refused"):
        check_run_files(manifest, tmp_path / "run")
