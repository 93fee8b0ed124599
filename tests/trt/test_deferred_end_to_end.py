"""A deferred run's build/ as a user meets it: the real command line makes the run directory, which is
copied elsewhere (the original deleted, no cache), then `python build/build_on_gpu.py` runs there as
the README says, with the test double as TensorRT (tests/trt/run_with_fake_tensorrt.py), and the
trtexec.txt commands name files that exist from where the file says to run them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trt.test_trtexec import commands_in

ROOT = Path(__file__).parents[2]


def run(args, cwd, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRTPIPE_CACHE": str(tmp_path / "gpu-cache")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def copied_run(tmp_path_factory) -> Path:
    """A deferred transformer_fp16 run through the real CLI, copied to another place."""
    work = tmp_path_factory.mktemp("cpu")
    done = run([sys.executable, "-m", "trtpipe", "+recipe=transformer_fp16",
                "stages=[sanitize,upgrade_opset,precision,build]", f"hydra.run.dir={work / 'run'}",
                f"cache.dir={work / 'cache'}"], work, work)
    assert done.returncode == 0, done.stderr
    assert (work / "run" / "build" / "build_on_gpu.py").is_file()
    copied = tmp_path_factory.mktemp("gpu") / "copied-run"
    shutil.copytree(work / "run", copied)
    shutil.rmtree(work)  # nothing may point back at the CPU machine's run directory or cache
    return copied


@pytest.mark.parametrize("where", ["run_dir", "elsewhere"])
def test_build_on_gpu_builds_from_a_copied_run_directory_with_fake_tensorrt(copied_run, tmp_path, where):
    out = tmp_path / "engine"
    if where == "run_dir":  # the README: `python build/build_on_gpu.py` in the copied run directory
        args, cwd = ["build/build_on_gpu.py", "--out", str(out)], copied_run
    else:
        args, cwd = [str(copied_run / "build" / "build_on_gpu.py"), "--out", str(out)], tmp_path
    done = run([sys.executable, "-m", "tests.trt.run_with_fake_tensorrt", *args], cwd, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stderr and "Traceback" not in done.stderr
    built = json.loads(re.search(r"^FAKE-BUILDS (.*)$", done.stdout, re.MULTILINE).group(1))
    assert built == [str(copied_run / "precision" / "model.onnx")]
    assert "build: ran" in done.stdout and "0 violation(s)" in done.stdout
    for name in ("model.engine", "layer_info.json", "precision_audit.json", "build.log", "trtexec.txt"):
        assert (out / name).is_file(), name
    audit = json.loads((out / "precision_audit.json").read_text())
    assert audit["totals"]["audited"] > 0 and audit["violations"] == []


def test_the_default_output_is_next_to_the_script(copied_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(copied_run, target)
    done = run([sys.executable, "-m", "tests.trt.run_with_fake_tensorrt", "build_on_gpu.py"], target / "build", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "build" / "gpu_build" / "model.engine").is_file()


def test_trtexec_txt_names_the_run_directory_s_model_from_where_it_says_to_run(copied_run):
    build = copied_run / "build"
    text = (build / "trtexec.txt").read_text()
    assert "Run from the directory of this file" in text
    digest = re.search(r"sha256 ([0-9a-f]{64})", text).group(1)
    for command in commands_in(text):
        onnx = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--onnx="))
        assert onnx == "../precision/model.onnx"
        assert hashlib.sha256((build / onnx).read_bytes()).hexdigest() == digest
    manifest = json.loads((copied_run / "manifest.json").read_text())
    precision = next(s for s in manifest["stages"] if s["name"] == "precision")
    assert precision["outputs"]["model"]["sha256"] == digest


def test_the_same_model_bytes_from_another_stage_get_their_own_trtexec_path(tmp_path):
    """The producing stage is in the build's key (`key_input_places`): a run whose model came through a
    no-op promote_outputs, then one straight from precision, must not reuse trtexec.txt's
    `../promote_outputs/model.onnx` (a directory the second run does not have)."""
    cache = tmp_path / "cache"
    for name, stages in (("with", "[sanitize,upgrade_opset,precision,promote_outputs,build]"),
                         ("without", "[sanitize,upgrade_opset,precision,build]")):
        done = run([sys.executable, "-m", "trtpipe", "+recipe=transformer_fp16", f"stages={stages}",
                    f"hydra.run.dir={tmp_path / name}", f"cache.dir={cache}"], tmp_path, tmp_path)
        assert done.returncode == 0, done.stderr
        build = tmp_path / name / "build"
        for command in commands_in((build / "trtexec.txt").read_text()):
            onnx = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--onnx="))
            assert (build / onnx).is_file(), (name, onnx)
