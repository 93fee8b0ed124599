"""Float inputs whose dynamic dims nothing sizes are refused before any stage, all in one message,
with an example that is not a one-step sequence (issue 30, item 5; found in session 11: the precision
stage refused them one at a time, after sanitize and the opset upgrade had run, and its example
shape set every dynamic dim to 1)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import cache_entries, run_trtpipe
from tests.test_cli_dynamic_inputs import pasted_fixes

NO_BUILD = "stages=[sanitize,upgrade_opset,precision,validate]"


def two_sequence_inputs() -> onnx.ModelProto:
    """frames [batch, ?, 8] @ w + context [batch, ?, 8] @ w: two float inputs, unnamed time dims."""
    w = numpy_helper.from_array(np.random.RandomState(0).rand(8, 8).astype(np.float32), "w")
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", None, 8]) for name in ("frames", "context")]
    nodes = [helper.make_node("MatMul", ["frames", "w"], ["a"], name="mm_frames"),
             helper.make_node("MatMul", ["context", "w"], ["b"], name="mm_context"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("unsized")
    onnx.save(two_sequence_inputs(), str(directory / "m.onnx"))
    return directory


def test_every_unsized_input_is_named_once_before_any_stage_and_the_fix_reaches_the_end(workdir):
    run = run_trtpipe(workdir, "model.path=m.onnx", NO_BUILD, run_name="unsized")
    output = run.stdout + run.stderr
    assert run.code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("trtpipe: error:")]
    assert len(errors) == 1 and "'frames' [batch, ?, 8]" in errors[0] and "'context' [batch, ?, 8]" in errors[0]
    assert "Traceback" not in output and cache_entries(workdir / "cache") == []  # no stage ran
    line, pasted = pasted_fixes(output)
    assert pasted == ["++data.inputs.frames.shape=[1,128,8]", "++data.inputs.context.shape=[1,128,8]"], line
    fixed = run_trtpipe(workdir, "model.path=m.onnx", NO_BUILD, *pasted, run_name="pasted")
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert fixed.statuses()["validate"] == "ran"
