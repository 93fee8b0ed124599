"""A big-endian `.npz` input is taken with its values (issue 32, item 11).

Reproduced before the fix: a float32 array saved as `'>f4'` was refused, exit 2, "is >f4, the
model expects float32. Fix: save it as float32" -- it is float32. Byte order is not a type: the
array is converted to native order (trtpipe/numerics/input_types.py), and the values the
reference run saw are the file's, not their bytes reversed.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.cli_helpers import run_trtpipe


def relu_model(path, elem_type: int):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", elem_type, [1, 16])],
                              [helper.make_tensor_value_info("y", elem_type, [1, 16])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("dtype, elem_type", [(">f4", TensorProto.FLOAT), (">i4", TensorProto.INT32)])
def test_a_big_endian_npz_input_is_read_with_its_values(tmp_path, dtype, elem_type):
    model = relu_model(tmp_path / "relu.onnx", elem_type)
    np.savez(tmp_path / "x.npz", x=np.arange(16).reshape(1, 16).astype(dtype))
    run = run_trtpipe(tmp_path, f"model.path={model}", f"data.path={tmp_path / 'x.npz'}",
                      "stages=[sanitize,upgrade_opset,precision]", "precision.auto.max_abs=1e4")
    assert run.code == 0, run.stdout + run.stderr
    assert "save it as" not in run.stderr
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    plan = json.loads((run.run_dir / stage["outputs"]["plan"]["path"]).read_text())
    if elem_type == TensorProto.FLOAT:  # the reference run saw 0..15, not their bytes reversed
        assert [node["observed_max_abs"] for node in plan["nodes"]] == [15.0], plan["nodes"]
