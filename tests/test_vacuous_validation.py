"""Validation never passes with nothing compared (issue 22, item 5).

Reproduced before the fix, through the command line on a real MatMul -> Relu model:
- all-NaN sample data (`data.path`): "emulated passed", cosine 1.0, every position left out;
- a zero-size sample input ([0, 16]): passed as well, and the precision stage put 100% of
  the FLOPs in FP16 on that "evidence";
- a reference that is inf/NaN at most positions (Log of mostly negative values): passed with
  a note.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"


def matmul_model(path, op: str = "Relu", shift: float = 0.0) -> None:
    """x [n, 16] -> MatMul (random weights) -> Add shift -> op: a dynamic batch, so [0, 16] fits."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.array(shift, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Add", ["h", "b"], ["s"], name="add"),
         helper.make_node(op, ["s"], ["y"], name="out")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])], [weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("name, values, needle", [
    ("nan", np.full((1, 16), np.nan, np.float32), "holds 16 inf/NaN value(s) of 16"),
    ("inf", np.where(np.arange(16) % 2, np.inf, 1.0).astype(np.float32)[None], "holds 8 inf/NaN value(s) of 16"),
    ("empty", np.zeros((0, 16), np.float32), "is empty (shape [0, 16])"),
])
def test_vacuous_sample_data_is_a_user_error_before_any_stage_runs(tmp_path, name, values, needle):
    matmul_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=values)
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=d.npz", STAGES)
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("trtpipe: error: sample input 'x'") and needle in errors[0], errors
    assert "Fix: " in errors[0]
    assert "running" not in run.stdout  # no stage ran
    assert not run.run_dir.exists()  # nothing half-written


def test_generated_inputs_with_a_zero_size_dimension_are_refused(tmp_path):
    """Before: refused only inside the precision stage, after sanitize and upgrade_opset ran."""
    matmul_model(tmp_path / "m.onnx")
    run = run_trtpipe(tmp_path, "model.path=m.onnx", STAGES, "+data.inputs.x={shape:[0,16]}")
    assert run.code == 2, run.stdout + run.stderr
    assert "data.inputs.x.shape [0, 16] has a dimension of size 0" in run.stderr, run.stderr
    assert "running" not in run.stdout


def test_allowed_nonfinite_data_still_fails_a_validation_that_compared_nothing(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=np.full((1, 16), np.nan, np.float32))
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=d.npz", "data.allow_nonfinite=true", STAGES)
    assert run.code == 1, run.stdout + run.stderr
    assert run.statuses()["validate"] == "failed"
    report = json.loads((run.run_dir / run.manifest["stages"][-1]["outputs"]["report"]["path"]).read_text())
    assert report["passed"] is False
    assert any("only 0 of 16 positions compared" in reason for reason in report["candidates"][0]["reasons"]), report


def test_a_reference_mostly_inf_or_nan_fails_and_says_how_much_was_compared(tmp_path):
    """Finite inputs, but Log of mostly negative values: the reference is NaN at most positions.
    Reproduced: validation passed (the candidate holds NaN at the same positions)."""
    matmul_model(tmp_path / "m.onnx", op="Log", shift=-6.0)
    run = run_trtpipe(tmp_path, "model.path=m.onnx", STAGES, "+data.inputs.x={low:0,high:1,shape:[4,16]}")
    assert run.code == 1, run.stdout + run.stderr
    report = json.loads((run.run_dir / run.manifest["stages"][-1]["outputs"]["report"]["path"]).read_text())
    reasons = " ".join(report["candidates"][0]["reasons"])
    assert "positions compared" in reasons and "validate.min_compared is 0.5" in reasons, reasons
    # With the bound lowered on purpose, the same run passes on what was compared.
    lowered = run_trtpipe(tmp_path, "model.path=m.onnx", STAGES, "+data.inputs.x={low:0,high:1,shape:[4,16]}",
                          "validate.min_compared=0", run_name="lowered")
    assert lowered.code == 0, lowered.stdout + lowered.stderr
