"""A quantized model's verdict, anchored on a float model (issue 31; trtpipe/validate/anchored.py).

Through the command line, on ONNX Runtime `quantize_static` models (tests/precision/qdq_models.py):
- a 16-layer MLP whose FP16 candidate is further from the QDQ model than the default bound (code
  flips feeding the next quantizer) and no further from the float model than the QDQ model itself:
  it passes under the anchored criterion, with the float model and with the anchor derived from the
  QDQ model, and the repair does not chase the flips;
- the same kind of model with an FP16 error of its own (an offset FP16 cannot carry, `precision=naive`):
  it fails against the QDQ model and against the anchor;
- a model without Q/DQ: its verdict is today's comparator's, bit for bit, and its report has nothing new;
- ONNX Runtime's default asymmetric activations, where the quantizer deleted the Relus (its
  QuantizeLinear clips instead): the derived anchor keeps each pair's saturation, so it stays as
  close to the float model as the QDQ model's own quantization allows (session 12: removing the
  pairs outright dropped the Relus, and the widened bounds let any candidate pass).
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cli_helpers import run_trtpipe
from tests.precision.qdq_models import ort_quantized_mlp
from trtpipe.numerics.metrics import output_metrics
from trtpipe.validate.anchored import widened_tolerance
from trtpipe.validate.compare import DEFAULT_TOLERANCE, Tolerance, judge

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    return ort_quantized_mlp(tmp_path_factory.mktemp("deep_mlp"))[0].parent


def _report(run) -> dict:
    stages = {s["name"]: s for s in run.manifest["stages"]}
    return json.loads((run.run_dir / stages["validate"]["outputs"]["report"]["path"]).read_text())


@pytest.mark.parametrize("with_float", [True, False], ids=["float_model", "derived"])
def test_code_flips_fail_against_the_qdq_model_and_pass_anchored(deep, with_float):
    extra = [f"validate.float_model={deep / 'float.onnx'}"] if with_float else []
    run = run_trtpipe(deep, f"model.path={deep / 'qdq.onnx'}", STAGES, *extra, run_name=f"deep_{with_float}")
    assert run.code == 0, run.stdout + run.stderr
    report = _report(run)
    emulated = report["candidates"][0]
    # Against the QDQ model the candidate is out of the default bound ...
    assert emulated["outputs"]["y"]["rel_l2"] > report["bounds"]["y"]["rel_l2"] == 0.044
    assert emulated["anchored"]["failed_against_reference"] == ["y"] and emulated["passed"]
    criterion = report["quantized"]["criterion"]
    assert criterion["kind"] == "anchored"
    assert criterion["anchor"]["source"] == ("validate.float_model" if with_float else "derived")
    # ... and against the anchor it is within the QDQ model's own distance, widened by the bound.
    own = criterion["reference_vs_anchor"]["y"]
    bounds = criterion["bounds"]["y"]
    assert bounds["rel_l2"] == pytest.approx(own["rel_l2"] + 0.044 * (1 + own["rel_l2"]))
    assert bounds["cosine_min"] == pytest.approx(math.cos(math.acos(own["cosine"]) + math.acos(0.999)))
    assert emulated["anchored"]["outputs"]["y"]["rel_l2"] <= bounds["rel_l2"]
    assert report["quantized"]["codes"]["share"] > 0.1  # the flips are there, and still reported
    out = run.stdout
    assert "ok by the anchored criterion (out of the bounds against the QDQ model)" in out
    assert "criterion: anchored on" in out and "vs the anchor: ok" in out
    summary = (run.run_dir / "summary.md").read_text()
    assert "| ok by the anchored criterion |" in summary and "| emulated vs the anchor | y |" in summary
    # The repair judged the automatic plan by the same criterion: nothing moved to FP32 for the flips.
    assert "(automatic plan)" in out and "repairing" not in out


def test_the_derived_anchor_drops_activation_qdq_and_keeps_weight_dequantize(deep):
    from trtpipe.validate.anchor_model import without_activation_qdq

    model = onnx.load(str(deep / "qdq.onnx"))
    anchor, removed = without_activation_qdq(model)
    before = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert removed == len(before) > 0 and not [n for n in anchor.graph.node if n.op_type == "QuantizeLinear"]
    initializers = {t.name for t in anchor.graph.initializer}
    weights = [n for n in anchor.graph.node if n.op_type == "DequantizeLinear"]
    assert weights and all(n.input[0] in initializers for n in weights)
    onnx.checker.check_model(anchor, full_check=True)
    # Without activation quantization it is closer to the float model than the QDQ model is.
    feeds = {"x": np.random.default_rng(5).random((4, 64), dtype=np.float32)}
    outputs = {name: ort.InferenceSession(m.SerializeToString() if isinstance(m, onnx.ModelProto) else str(m),
                                          providers=["CPUExecutionProvider"]).run(None, feeds)[0]
               for name, m in (("float", deep / "float.onnx"), ("qdq", deep / "qdq.onnx"), ("anchor", anchor))}
    assert output_metrics(outputs["float"], outputs["anchor"]).rel_l2 \
        < output_metrics(outputs["float"], outputs["qdq"]).rel_l2


def test_an_fp16_error_of_the_model_fails_against_both(tmp_path):
    ort_quantized_mlp(tmp_path, depth=2, tail_offset=20000.0)
    run = run_trtpipe(tmp_path, f"model.path={tmp_path / 'qdq.onnx'}",
                      f"validate.float_model={tmp_path / 'float.onnx'}", "precision=naive", STAGES, run_name="offset")
    assert run.code == 1, run.stdout + run.stderr
    emulated = _report(run)["candidates"][0]
    assert not emulated["passed"] and not emulated["anchored"]["passed"]
    assert emulated["anchored"]["failed_against_reference"] == ["y"]
    assert emulated["reasons"][0].startswith("y: against the anchor, rel_l2 ")
    assert "FAIL: against the anchor, rel_l2" in run.stdout


def test_a_model_without_qdq_is_judged_as_before(deep):
    """A tight bound makes the repair run trials too; the written verdict is the unchanged comparator's."""
    from trtpipe.numerics.emulator import EmulatedRunner
    from trtpipe.numerics.reference import ReferenceRunner
    from trtpipe.data import sample_feeds
    from trtpipe.validate.compare import Tolerances, compare_candidate

    run = run_trtpipe(deep, f"model.path={deep / 'float.onnx'}", STAGES, "validate.tolerance.rel_l2=0.0004",
                      run_name="float_only")
    assert run.code == 0, run.stdout + run.stderr
    assert "repaired:" in run.stdout + run.stderr
    report = _report(run)
    assert "quantized" not in report and "anchored" not in report["candidates"][0]
    stages = {s["name"]: s for s in run.manifest["stages"]}
    reference = onnx.load(str(run.run_dir / stages["sanitize"]["outputs"]["model"]["path"]))
    candidate = onnx.load(str(run.run_dir / stages["precision"]["outputs"]["model"]["path"]))
    feeds = sample_feeds(reference, json.loads((run.run_dir / "manifest.json").read_text())["config"]["data"])
    expected = compare_candidate("emulated", [ReferenceRunner(reference).run(f) for f in feeds],
                                 [EmulatedRunner(candidate).run(f) for f in feeds], ["y"],
                                 Tolerances.from_mapping({"rel_l2": 0.0004}), 0.5)
    assert report["candidates"][0] == expected.to_json()


@pytest.mark.parametrize("seed", range(20))
def test_a_candidate_within_the_bounds_of_the_qdq_model_meets_the_widened_ones(seed):
    """The triangle inequalities of anchored.py on random outputs: never stricter than today."""
    rng = np.random.default_rng(seed)
    anchor = rng.normal(0, 1, (2, 3, 8, 8))
    reference = anchor + rng.normal(0, rng.uniform(0.001, 0.2), anchor.shape) * rng.uniform(0.5, 2.0)
    candidate = reference + rng.normal(0, 0.02, anchor.shape)
    tolerance = Tolerance(rel_l2=0.044, cosine_min=0.999, psnr_min=30.0, max_abs=0.2, argmax_agree_min=0.9)
    against_reference = output_metrics(reference, candidate)
    if not judge(against_reference, tolerance)[0]:
        pytest.skip("this draw fails against the reference: the property says nothing of it")
    peak_ratio = (reference.max() - reference.min()) / (anchor.max() - anchor.min())
    widened = widened_tolerance(tolerance, output_metrics(anchor, reference), peak_ratio)
    passed, reasons = judge(output_metrics(anchor, candidate), widened)
    assert passed, reasons
    assert widened_tolerance(DEFAULT_TOLERANCE, output_metrics(anchor, anchor)).rel_l2 == pytest.approx(0.044)


def test_the_derived_anchor_keeps_the_saturation_of_relus_the_quantizer_deleted(tmp_path):
    from trtpipe.validate.anchor_model import without_activation_qdq

    float_path, qdq_path = ort_quantized_mlp(tmp_path, depth=3, activation_symmetric=False)
    model = onnx.load(str(qdq_path))
    assert not [n for n in model.graph.node if n.op_type == "Relu"]  # the quantizer deleted them
    anchor, replaced = without_activation_qdq(model)
    assert replaced > 0 and not [n for n in anchor.graph.node if n.op_type == "QuantizeLinear"]
    assert len([n for n in anchor.graph.node if n.op_type in ("Max", "Min")]) == 2 * replaced
    onnx.checker.check_model(anchor, full_check=True)
    feeds = {"x": np.random.default_rng(7).random((4, 64), dtype=np.float32)}
    outputs = {name: ort.InferenceSession(m.SerializeToString() if isinstance(m, onnx.ModelProto) else str(m),
                                          providers=["CPUExecutionProvider"]).run(None, feeds)[0]
               for name, m in (("float", float_path), ("qdq", qdq_path), ("anchor", anchor))}
    # The Relus' clipping is in the anchor: it is nearer the float model than the QDQ model is (with the
    # pairs removed outright it was over 1 rel_l2 away), so the widened bounds stay narrow.
    assert output_metrics(outputs["float"], outputs["anchor"]).rel_l2 \
        < output_metrics(outputs["float"], outputs["qdq"]).rel_l2 < 0.2
    assert output_metrics(outputs["anchor"], outputs["qdq"]).rel_l2 < 0.2
