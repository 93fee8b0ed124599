"""A source model is known by its bytes, not by its stat (issue 32, item 4).

Reproduced before the fix: `cp --preserve=timestamps B model.onnx` over a model A of the same
size keeps size, mtime and inode, the only keys of the source-digest memo; the next run took
A's sha256 for B's manifest and served A's cached stages. The memo now also keys on ctime
(which cp cannot set back) and a hash of the head, middle and tail of each file, and is served
only for a file that had settled when it was hashed (trtpipe/cache/digest_memo.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe


def matmul_model(path, weight: float):
    w = numpy_helper.from_array(np.full((64, 64), weight, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(shutil.which("cp") is None, reason="needs cp")
def test_a_copy_that_keeps_size_mtime_and_inode_is_hashed_again(tmp_path):
    model, other = matmul_model(tmp_path / "model.onnx", 1.0), matmul_model(tmp_path / "b.onnx", 2.0)
    assert model.stat().st_size == other.stat().st_size and sha256(model) != sha256(other)
    os.utime(other, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns))
    time.sleep(2.1)  # the model has settled: the first run's memo record is one that may be served
    first = run_trtpipe(tmp_path, f"model.path={model}", "stages=[sanitize]", run_name="a")
    assert first.code == 0, first.stdout + first.stderr
    assert first.manifest["source"]["sha256"] == sha256(model)
    before = model.stat()
    subprocess.run(["cp", "--preserve=timestamps", str(other), str(model)], check=True)
    after = model.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    second = run_trtpipe(tmp_path, f"model.path={model}", "stages=[sanitize]", run_name="b")
    assert second.code == 0, second.stdout + second.stderr
    assert second.manifest["source"]["sha256"] == sha256(model) == sha256(other)
    assert second.statuses()["sanitize"] == "ran"  # not A's cached entry
    third = run_trtpipe(tmp_path, f"model.path={model}", "stages=[sanitize]", run_name="c")
    assert third.code == 0 and "changed while trtpipe was reading it" not in third.stderr, third.stderr
    assert third.manifest["source"]["sha256"] == sha256(other) and third.statuses()["sanitize"] == "cached"
