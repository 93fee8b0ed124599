"""Disk in proportion to what changed (issue 33, item 1; trtpipe/cache/publish.py).

Before: every run directory held a full copy of each stage's model (sanitize, upgrade_opset,
precision) beside the cache's own, and upgrade_opset's entry held a second copy of a model it
left byte for byte unchanged: a 117 MB model's run directory and cache took 5.0x its size,
and a failed run left its model copies behind."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from bench.disk.disk import unique_bytes, write_chain
from tests.cli_helpers import cache_entries, run_trtpipe

NO_BUILD = "stages=[sanitize,upgrade_opset,precision]"
DATA = "+data.inputs.x={low:-1,high:1,dtype:float32}"
BOUND = 1.6  # docs/cache.md: run directory + cache <= 1.6x the source for the default pipeline


def trtpipe_verify(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("trtpipe-verify")), str(run_dir)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def stage_files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and ".hydra" not in p.parts}


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """A 2.9 MB model (its files above publish.LINK_MIN_BYTES) through sanitize, upgrade, precision."""
    workdir = tmp_path_factory.mktemp("disk-linked")
    model = write_chain(workdir / "model" / "chain.onnx", width=600, layers=2)
    run = run_trtpipe(workdir, NO_BUILD, f"model.path={model}", DATA)
    assert run.code == 0, run.stdout + run.stderr
    return workdir, model, run


def test_a_stage_whose_output_equals_its_input_stores_nothing_new(linked):
    workdir, _, run = linked
    sanitize, upgrade = (run.run_dir / name / "model.onnx" for name in ("sanitize", "upgrade_opset"))
    assert "opset 17 -> 17" in run.stdout, run.stdout
    entries = {path.parent.name: path for path in cache_entries(workdir / "cache")}
    cached = {stage: os.stat(entries[stage] / "model.onnx") for stage in ("sanitize", "upgrade_opset")}
    assert cached["sanitize"].st_ino == cached["upgrade_opset"].st_ino, "upgrade_opset's unchanged model is stored once"
    assert os.stat(sanitize).st_ino == os.stat(upgrade).st_ino == cached["sanitize"].st_ino


def test_models_are_read_only_links_and_small_files_private_copies(linked):
    workdir, _, run = linked
    model = run.run_dir / "precision" / "model.onnx"
    plan = run.run_dir / "precision" / "precision_plan.json"
    assert model.stat().st_nlink == 2 and stat.S_IMODE(model.stat().st_mode) & 0o222 == 0
    assert plan.stat().st_nlink == 1, "a plan the user may edit is a copy (issue 22, item 6)"
    for entry in cache_entries(workdir / "cache"):
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in entry.iterdir()}
        assert all(mode & 0o222 == 0 for mode in modes.values()), (entry, modes)
    onnx.checker.check_model(str(model), full_check=True)  # the run directory's model loads as it is


def test_a_write_through_a_link_is_detected_by_the_cache_and_by_verify(linked, tmp_path):
    workdir, model, run = linked
    # A copy of the run directory and its cache, so the module's run stays intact for the other tests.
    cache = tmp_path / "cache"
    subprocess.run(["cp", "-a", str(workdir / "cache"), str(cache)], check=True)
    first = run_trtpipe(tmp_path, NO_BUILD, f"model.path={model}", DATA, cache=cache, run_name="first")
    assert first.code == 0 and first.statuses()["precision"] == "cached", first.stdout + first.stderr
    target = first.run_dir / "precision" / "model.onnx"
    target.chmod(0o644)  # what a user (or root, who needs no chmod) does to write the shared file in place
    with open(target, "r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"\x00\x00\x80\x7f")
    second = run_trtpipe(tmp_path, NO_BUILD, f"model.path={model}", DATA, cache=cache, run_name="second")
    assert second.code == 0, second.stdout + second.stderr
    assert second.statuses()["precision"] == "ran" and "does not match its recorded sha256" in second.stdout + second.stderr
    verified = trtpipe_verify(first.run_dir, tmp_path)
    assert verified.returncode == 2 and "cannot be trusted: precision/model.onnx" in verified.stderr, verified.stderr
    assert trtpipe_verify(second.run_dir, tmp_path).returncode == 0, "the rebuilt entry is a new file"


def test_final_keeps_only_the_last_model_and_verify_notes_the_others(linked, tmp_path):
    workdir, model, _ = linked
    run = run_trtpipe(tmp_path, NO_BUILD, f"model.path={model}", DATA, "run.artifacts=final", cache=workdir / "cache")
    assert run.code == 0, run.stdout + run.stderr
    assert stage_files(run.run_dir) == {"manifest.json", "summary.md", "trtpipe.log", "precision/model.onnx",
                                        "precision/precision_plan.json"}
    assert run.manifest["left_in_cache"] == ["sanitize/model.onnx", "upgrade_opset/model.onnx"]
    assert "not placed in the run directory (run.artifacts=final" in run.stdout + run.stderr
    verified = trtpipe_verify(run.run_dir, tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "sanitize/model.onnx, upgrade_opset/model.onnx not in the run directory" in verified.stdout + verified.stderr


def test_a_failed_run_keeps_its_reports_not_its_models(tmp_path):
    run = run_trtpipe(tmp_path, "+recipe=naive_fp16", "model.builtin=transformer")
    assert run.code == 1, run.stdout + run.stderr
    files = stage_files(run.run_dir)
    assert {"manifest.json", "trtpipe.log", "validate/validation.json", "precision/precision_plan.json"} <= files
    assert not [name for name in files if name.endswith((".onnx", ".data"))], files
    assert run.manifest["left_in_cache"] == ["sanitize/model.onnx", "upgrade_opset/model.onnx",
                                             "precision/model.onnx"]
    assert json.loads((run.run_dir / "validate" / "validation.json").read_text())["passed"] is False


def test_an_unknown_artifacts_choice_is_one_line_exit_2(tmp_path):
    run = run_trtpipe(tmp_path, "stages=[sanitize]", "run.artifacts=last")
    assert run.code == 2, run.stdout + run.stderr
    assert "config value of 'run.artifacts' is 'last'" in run.stderr and "run.artifacts=" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_run_directory_and_cache_hold_a_large_model_in_1_6x_its_size(tmp_path):
    """The bound docs/cache.md states, on a 117 MB model through the default pipeline (build
    deferred without TensorRT); a second, fully cached run adds no model bytes."""
    source = write_chain(tmp_path / "model" / "big.onnx", width=2048, layers=7)
    size = source.stat().st_size
    assert size >= 100e6
    first = run_trtpipe(tmp_path, f"model.path={source}", "+data.inputs.x={low:-1,high:1,dtype:float32}",
                        run_name="first", timeout=600)
    assert first.code == 0, first.stdout + first.stderr
    used = unique_bytes(first.run_dir, tmp_path / "cache")
    assert used <= BOUND * size, f"{used / size:.2f}x the source"
    second = run_trtpipe(tmp_path, f"model.path={source}", "+data.inputs.x={low:-1,high:1,dtype:float32}",
                         run_name="second", timeout=600)
    assert second.code == 0 and set(second.statuses().values()) <= {"cached", "deferred"}, second.stdout
    assert unique_bytes(first.run_dir, second.run_dir, tmp_path / "cache") - used < 1e6


def test_a_failed_rerun_into_a_run_directory_removes_the_earlier_models(linked, tmp_path):
    """The rerun's manifest names the models it did not place: an earlier run's file at such a name
    would be described by no manifest (trtpipe-verify would call the directory untrustworthy)."""
    workdir, model, _ = linked
    stages = "stages=[sanitize,upgrade_opset,precision,validate]"
    first = run_trtpipe(tmp_path, stages, f"model.path={model}", DATA, cache=workdir / "cache", run_name="same")
    assert first.code == 0 and (first.run_dir / "sanitize" / "model.onnx").exists(), first.stdout + first.stderr
    failed = run_trtpipe(tmp_path, stages, f"model.path={model}", DATA, "precision.repair=false",
                         "validate.tolerance.max_abs=1e-9", cache=workdir / "cache", run_name="same")
    assert failed.code == 1, failed.stdout + failed.stderr
    assert not [name for name in stage_files(failed.run_dir) if name.endswith(".onnx")]
    verified = trtpipe_verify(failed.run_dir, tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
