"""Explicitly quantized models from the command line (issue 31, items 1, 2 and 4 in part): an FP8 Q/DQ
model gets a verdict (before, validate refused its float8 codes with exit 2 and a Fix that could not
be applied), an INT8 model whose DQs are planned FP16 prints no parser warning about them (before:
"DequantizeLinear planned fp16 ... not FP16", the list being of DQ input types), and no Q/DQ scale
is stored in FP16 below FP16's normal range (before: ONNX Runtime's INT32 bias scales, 7.5e-8 to
1.5e-6, were written FP16 subnormal)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.precision.qdq_models import qdq_model

FP16_MIN_NORMAL = 2.0**-14
MODELS = {"int8": dict(kind="int8", opset=19), "fp8_19": dict(kind="fp8", opset=19),
          "fp8_21": dict(kind="fp8", opset=21), "ort_bias": dict(kind="int8", opset=19, ort_bias=True)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("quantized")
    for name, how in MODELS.items():
        onnx.save(qdq_model(**how), str(workdir / f"{name}.onnx"))
    return workdir


def _artifact(run, stage: str, output: str):
    stages = {s["name"]: s for s in run.manifest["stages"]}
    return run.run_dir / stages[stage]["outputs"][output]["path"]


def _plan_nodes(run) -> dict:
    return {n["name"]: n for n in json.loads(_artifact(run, "precision", "plan").read_text())["nodes"]}


@pytest.mark.parametrize("name, recipe", [("fp8_19", None), ("fp8_21", None), ("fp8_19", "fp32")])
def test_fp8_qdq_model_gets_a_verdict(workdir, name, recipe):
    overrides = [f"model.path={workdir / name}.onnx", f"upgrade_opset.target={MODELS[name]['opset']}"]
    if recipe:
        overrides.insert(0, f"+recipe={recipe}")
    run = run_trtpipe(workdir, *overrides, run_name=f"{name}-{recipe or 'default'}")
    assert run.code in (0, 1), run.stdout + run.stderr
    assert "fp8e4m3fn tensor" not in run.stdout + run.stderr
    report = json.loads(_artifact(run, "validate", "report").read_text())
    emulated = next(c for c in report["candidates"] if c["name"] == "emulated")
    assert emulated["outputs"]["y"]["nonfinite"] == 0
    assert report["passed"] == (run.code == 0)
    # The share of FP8 codes that differ is reported (compared by their bits; a step has no one size).
    codes = report["quantized"]["codes"]
    assert codes["types"] == ["float8e4m3fn"] and codes["compared"] > 0 and codes["max_step"] is None
    assert "float8e4m3fn codes" in run.stdout and "fake-quant" in run.stdout
    # The codes stay float8 in the written model: the quantizer's Q outputs are not the plan's to retype.
    written = onnx.load(str(_artifact(run, "precision", "model")))
    zero_points = [t for t in written.graph.initializer if t.name.endswith("_zp")]
    assert zero_points and all(t.data_type == TensorProto.FLOAT8E4M3FN for t in zero_points)


def test_fp16_dequantize_is_no_parser_warning(workdir):
    run = run_trtpipe(workdir, f"model.path={workdir / 'int8'}.onnx", "upgrade_opset.target=19", run_name="int8")
    assert run.code == 0, run.stdout + run.stderr
    planned = [n for n in _plan_nodes(run).values() if n["op_type"] == "DequantizeLinear"]
    assert len(planned) == 4 and all(n["precision"] == "fp16" for n in planned)
    output = run.stdout + run.stderr
    assert "DequantizeLinear planned" not in output and "DequantizeLinear input" not in output
    report = json.loads((run.run_dir / "build" / "parser_support.json").read_text())
    assert report["plan_precision"] == [] and report["dequantize_inputs"] == []
    # The written DQs output FP16: their scales are FP16 (opset 19), as the plan says.
    written = onnx.load(str(_artifact(run, "precision", "model")))
    scales = {t.name: t.data_type for t in written.graph.initializer}
    dequantizers = [n for n in written.graph.node if n.op_type == "DequantizeLinear"]
    assert all(scales[n.input[1]] == TensorProto.FLOAT16 for n in dequantizers)


def test_no_fp16_scale_below_the_normal_range(workdir):
    # The bias DQ is kept (sanitize folds it by default, test_ort_bias_dequantize_is_folded...): its
    # subnormal-in-FP16 scale is what this test is about.
    run = run_trtpipe(workdir, f"model.path={workdir / 'ort_bias'}.onnx", "upgrade_opset.target=19",
                      "precision.repair=false", "sanitize.fold_bias_dequantize=false", run_name="ort_bias")
    assert run.code == 0, run.stdout + run.stderr
    written = onnx.load(str(_artifact(run, "precision", "model")))
    initializers = {t.name: t for t in written.graph.initializer}
    quantizers = [n for n in written.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    for node in quantizers:
        scale = initializers[node.input[1]]
        if scale.data_type == TensorProto.FLOAT16:
            values = np.abs(numpy_helper.to_array(scale).astype(np.float64))
            assert not ((values > 0) & (values < FP16_MIN_NORMAL)).any(), node.name
    assert initializers["b_s"].data_type == TensorProto.FLOAT
    bias = _plan_nodes(run)["b_DQ"]
    assert bias["precision"] == "fp32" and "below fp16's normal range" in bias["reason"]
    # The parser check names the INT32 bias DQ by its input type, not by its planned output.
    report = json.loads((run.run_dir / "build" / "parser_support.json").read_text())
    assert [f["input_type"] for f in report["dequantize_inputs"]] == ["INT32"]
    assert "DequantizeLinear with INT32 input" in run.stdout + run.stderr
