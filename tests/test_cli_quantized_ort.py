"""ONNX Runtime's own `quantize_static` QDQ model through the command line (issue 31, items 3 and 4).

- Its INT32 bias DequantizeLinears (one per Conv and Gemm) are folded by sanitize into FP32
  constants, named in the stage line and in `sanitize/bias_dequantize.json`, and the outputs
  stay what ONNX Runtime computes for the quantized model (before: nothing said, and
  TensorRT-RTX 1.7.1 built such a model float x float).
- `validate.float_model=` (the model before quantization) adds what quantization costs (the
  reference vs the float model) and what FP16 adds (the candidate vs the float model) to the
  report and the console; the verdict says that its reference includes fake-quant and gives the
  share of int8 codes that differ. Bad paths are exit 2 in one line, before any stage.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cli_helpers import run_trtpipe
from tests.precision.qdq_models import ort_quantized_pair

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ort_quantized")
    ort_quantized_pair(workdir)
    return workdir


@pytest.fixture(scope="module")
def with_float(workdir):
    return run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", f"validate.float_model={workdir / 'float.onnx'}",
                       STAGES, run_name="with_float")


def _artifact(run, stage: str, kind: str):
    stages = {s["name"]: s for s in run.manifest["stages"]}
    return run.run_dir / stages[stage]["outputs"][kind]["path"]


def test_bias_dequantize_is_folded_named_and_changes_no_output(workdir, with_float):
    run = with_float
    assert run.code == 0, run.stdout + run.stderr
    line = next(line for line in run.stdout.splitlines() + run.stderr.splitlines() if " sanitize " in line
                and " ran " in line)
    assert "3 INT32 bias DequantizeLinear folded to FP32 (c1_b_DequantizeLinear, c2_b_DequantizeLinear, " \
           "fc_b_DequantizeLinear" in line
    listed = json.loads((run.run_dir / "sanitize" / "bias_dequantize.json").read_text())
    assert sorted(e["readers"][0] for e in listed["bias_dequantize_folded"]) == ["c1", "c2", "fc"]
    assert "TensorRT-RTX" in listed["bias_dequantize_reason"]
    sanitized = onnx.load(str(_artifact(run, "sanitize", "model")))
    int32 = {t.name for t in sanitized.graph.initializer if t.data_type == onnx.TensorProto.INT32}
    assert not [n for n in sanitized.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int32]
    feeds = {"x": np.random.default_rng(3).random((1, 3, 16, 16), dtype=np.float32)}
    before = ort.InferenceSession(str(workdir / "qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    after = ort.InferenceSession(str(_artifact(run, "sanitize", "model")),
                                 providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(before[0], after[0])


def test_the_switch_leaves_them(workdir):
    run = run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", "stages=[sanitize]",
                      "sanitize.fold_bias_dequantize=false", run_name="unfolded")
    assert run.code == 0, run.stdout + run.stderr
    assert "bias DequantizeLinear" not in run.stdout + run.stderr
    assert not (run.run_dir / "sanitize" / "bias_dequantize.json").exists()


def test_float_model_gives_what_quantization_costs_and_what_fp16_adds(with_float, workdir):
    run = with_float
    report = json.loads(_artifact(run, "validate", "report").read_text())
    quantized = report["quantized"]
    assert "Q/DQ included" in quantized["reference"] and "fake-quant" in quantized["reference"]
    assert quantized["float_model"]["path"] == str((workdir / "float.onnx").resolve())
    comparisons = {c["name"]: c for c in quantized["float_model"]["comparisons"]}
    assert list(comparisons) == ["reference", "emulated"]
    cost = comparisons["reference"]["outputs"]["y"]["rel_l2"]
    together = comparisons["emulated"]["outputs"]["y"]["rel_l2"]
    verdict = report["candidates"][0]["outputs"]["y"]["rel_l2"]
    # Quantization costs something; the verdict (candidate vs QDQ) is another, smaller number.
    assert cost > 0 and together > 0 and verdict < cost
    codes = quantized["codes"]
    quantizers = [n for n in onnx.load(str(workdir / "qdq.onnx")).graph.node if n.op_type == "QuantizeLinear"]
    assert codes["types"] == ["int8"] and codes["tensors"] == len(quantizers) > 0  # every activation Q's codes
    assert 0 < codes["differ"] < codes["compared"]
    assert codes["share"] == pytest.approx(codes["differ"] / codes["compared"])
    out = run.stdout
    assert "note: the reference is the model as given to validate, its Q/DQ included" in out
    assert f"codes: {codes['differ']} of {codes['compared']} int8 codes" in out
    assert "against the float model" in out
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("what quantization costs",
                                                                         "quantization and FP16 together"))
            and not line.lstrip().startswith("note:")]
    assert [row.split()[0] for row in rows] == ["reference", "emulated"]


def test_float_model_content_is_in_the_key(workdir, with_float):
    moved = workdir / "float_copy.onnx"
    moved.write_bytes((workdir / "float.onnx").read_bytes())
    model = onnx.load(str(moved))
    bias = next(t for t in model.graph.initializer if t.name == "fc_b")
    bias.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(bias) + 1, "fc_b"))
    onnx.save(model, str(moved))
    first = run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", f"validate.float_model={moved}",
                        STAGES, run_name="changed_a")
    assert first.statuses()["validate"] == "ran"
    again = run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", f"validate.float_model={moved}",
                        STAGES, run_name="changed_b")
    assert again.statuses()["validate"] == "cached"
    onnx.save(onnx.load(str(workdir / "float.onnx")), str(moved))  # same path, other content
    third = run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", f"validate.float_model={moved}",
                        STAGES, run_name="changed_c")
    assert third.statuses()["validate"] == "ran"


def _renamed_output(workdir):
    model = onnx.load(str(workdir / "float.onnx"))
    model.graph.output[0].name = "z"
    model.graph.node[-1].output[0] = "z"
    onnx.save(model, str(workdir / "renamed.onnx"))
    return workdir / "renamed.onnx"


def _garbage(workdir):
    (workdir / "garbage.onnx").write_text("not a model\n")
    return workdir / "garbage.onnx"


@pytest.mark.parametrize("make, says", [
    (lambda w: w / "missing.onnx", "does not exist"),
    (_garbage, "is not a valid ONNX protobuf"),
    (_renamed_output, "is not the unquantized form of the model: its outputs are ['z'], the model's ['y']"),
], ids=["missing", "not_onnx", "other_outputs"])
def test_bad_float_model_is_one_line_before_any_stage(workdir, make, says):
    path = make(workdir)
    run = run_trtpipe(workdir, f"model.path={workdir / 'qdq.onnx'}", f"validate.float_model={path}", STAGES,
                      run_name=f"bad_{path.stem}")
    assert run.code == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("trtpipe: error: validate.float_model") and says in lines[0]
    assert "Fix: point validate.float_model at the unquantized ONNX model" in lines[0]
    assert "Traceback" not in run.stdout + run.stderr
    assert not run.run_dir.exists()


def test_a_bad_float_model_in_a_sweep_is_refused_before_any_job(workdir):
    renamed = _renamed_output(workdir)
    run = run_trtpipe(workdir, "-m", f"model.path={workdir / 'qdq.onnx'}", STAGES,
                      f"validate.float_model={workdir / 'float.onnx'},{renamed}", f"hydra.sweep.dir={workdir / 'sweep'}")
    assert run.code == 2, run.stdout + run.stderr
    assert "validate.float_model" in run.stderr and "is not the unquantized form" in run.stderr
    assert not (workdir / "sweep").exists()  # no job ran, not even the good value's
