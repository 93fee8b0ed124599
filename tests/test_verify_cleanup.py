"""`trtpipe-verify` leaves no temporary directory behind (issue 14, item 12), whatever the
verdict; `--keep` keeps the rebuild and says where. Runs the real console script with
TMPDIR set to a directory of the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe


def trtpipe_verify(target: Path, *extra: str, cwd: Path, tmpdir: Path) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("trtpipe-verify")), str(target), *extra]
    return subprocess.run(command, cwd=cwd, env={**os.environ, "TMPDIR": str(tmpdir)}, capture_output=True,
                          text=True, timeout=300)


def small_model(path: Path) -> None:
    """y = relu(x @ w), x [2, 4]: a model whose run and rebuild take a second (also test_verify_trust.py)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="/mm"), helper.make_node("Relu", ["h"], ["y"], name="/relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("verify-cleanup")
    small_model(workdir / "mm.onnx")
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=mm.onnx")
    assert run.code == 0, run.stdout + run.stderr
    return workdir, run


def left_behind(scratch: Path) -> list[Path]:
    """What is in the test's TMPDIR, but ONNX Runtime's `.ses` (its telemetry session file,
    written when onnxruntime is imported, in any process that imports it: not trtpipe's)."""
    return [path for path in scratch.iterdir() if path.name != ".ses"]


def _scratch(tmp_path: Path) -> Path:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return scratch


def test_an_identical_verdict_leaves_no_temporary_directory(recorded, tmp_path):
    workdir, run = recorded
    scratch = _scratch(tmp_path)
    done = trtpipe_verify(run.run_dir, cwd=workdir, tmpdir=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert left_behind(scratch) == []
    assert done.stdout.splitlines()[-1] == "trtpipe-verify: identical; rebuild removed (--keep keeps it)"


def test_a_drifted_verdict_leaves_no_temporary_directory(recorded, tmp_path):
    workdir, run = recorded
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    manifest["config"]["upgrade_opset"]["fuse_layernorm"] = not manifest["config"]["upgrade_opset"]["fuse_layernorm"]
    edited = tmp_path / "edited" / "manifest.json"
    edited.parent.mkdir()
    edited.write_text(json.dumps(manifest))
    scratch = _scratch(tmp_path)
    done = trtpipe_verify(edited, "--json", cwd=workdir, tmpdir=scratch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout)["run_dir"] is None
    assert left_behind(scratch) == []


def test_keep_keeps_the_rebuild_and_says_where(recorded, tmp_path):
    workdir, run = recorded
    scratch = _scratch(tmp_path)
    done = trtpipe_verify(run.run_dir, "--json", "--keep", cwd=workdir, tmpdir=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = Path(json.loads(done.stdout)["run_dir"])
    assert (kept / "manifest.json").is_file() and scratch in kept.parents
    assert [p.name.startswith("trtpipe-verify-") for p in left_behind(scratch)] == [True]
