"""Error measures that fit the output: a softmax-probability output and a zero-mean output
with many near-zero elements, run through the real pipeline (precision stage, FP16 emulation,
validate) with the default config and the transformer recipe.

The model is a classifier + regression head on a small ReLU trunk, each head written the way
a folded normalisation leaves it: a MatMul whose outputs share a large common part (a feature
with a DC component; `offset`) and a bias that removes it. In FP16 the MatMul's outputs are
rounded at their own magnitude, so the heads' outputs carry an error set by `offset`:
- offset 30: pre-bias values ~7x the outputs. The FP16 plan is accurate by every whole-output
  measure (rel_l2 ~3e-3 on the regression output, ~5e-3 on the probabilities; cosine
  > 0.9999), but the regression output's elements near zero have elementwise relative
  errors of ~0.2 (measured 0.23): the transformer recipe's former bound `max_rel: 0.1`
  rejected this plan.
- offset 3000: pre-bias values ~3600, below the range rule's 4096, so the automatic plan
  keeps them FP16; rounded to FP16's step of 2 there, the logits are off by ~1 and the
  probabilities are wrong (measured cosine 0.95, rel_l2 0.33). Both configs must reject it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import trtpipe.api as api
from trtpipe.numerics.metrics import OutputMetrics
from trtpipe.validate.compare import Tolerance, judge

FP32 = TensorProto.FLOAT
WIDTH, CLASSES, TARGETS = 256, 1000, 128


def folded_head_model(offset: float, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.RandomState(seed)
    w1 = rng.normal(0, np.sqrt(2 / 64), (64, WIDTH)).astype(np.float32)
    calibration = np.maximum(rng.uniform(-1, 1, (256, 64)).astype(np.float32) @ w1, 0)

    def folded(outputs: int, spread: float):
        # Columns share `offset / E[sum h]`: every output's pre-bias value is ~offset + signal.
        weights = rng.normal(0, spread / np.sqrt(WIDTH), (WIDTH, outputs)) + offset / calibration.sum(1).mean()
        weights = weights.astype(np.float32)
        return weights, (-(calibration @ weights).mean(0)).astype(np.float32)

    wc, bc = folded(CLASSES, 20.0)
    wr, br = folded(TARGETS, 1.0)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a1"], name="trunk/MatMul"),
        helper.make_node("Relu", ["a1"], ["h"], name="trunk/Relu"),
        helper.make_node("MatMul", ["h", "wc"], ["zc"], name="classifier/MatMul"),
        helper.make_node("Add", ["zc", "bc"], ["logits"], name="classifier/Add"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="classifier/Softmax", axis=-1),
        helper.make_node("MatMul", ["h", "wr"], ["zr"], name="regressor/MatMul"),
        helper.make_node("Add", ["zr", "br"], ["offsets"], name="regressor/Add"),
    ]
    initializers = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (wc, "wc"), (bc, "bc"), (wr, "wr"),
                                                                (br, "br")]]
    graph = helper.make_graph(
        nodes, "folded_head", [helper.make_tensor_value_info("x", FP32, [8, 64])],
        [helper.make_tensor_value_info("probs", FP32, [8, CLASSES]),
         helper.make_tensor_value_info("offsets", FP32, [8, TARGETS])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def validate(tmp_path, offset: float, *recipe: str) -> dict:
    """The validation.json of a real run on the folded-head model (no build stage)."""
    path = tmp_path / f"folded_head_{offset:g}.onnx"
    onnx.save(folded_head_model(offset), str(path))
    # The repair off: these tests judge the metrics on the automatic plan (the repair would fix it).
    overrides = [*recipe, f"model.path={path}", "+data.inputs.x={low:-1,high:1}", f"cache.dir={tmp_path / 'cache'}",
                 "stages=[sanitize,upgrade_opset,precision,validate]", "precision.repair=false"]
    run_dir = tmp_path / f"run_{offset:g}_{'_'.join(recipe) or 'default'}"
    try:
        result = api.run(overrides, run_dir=run_dir, start_dir=tmp_path)
    except api.PipelineFailed as failed:
        result = failed.result
    report = result.validation
    assert report == json.loads((run_dir / "validate" / "validation.json").read_text())
    return report


def metrics_of(report: dict, output: str) -> OutputMetrics:
    return OutputMetrics.from_json(report["candidates"][0]["outputs"][output])


@pytest.mark.parametrize("recipe", [(), ("+recipe=transformer_fp16",)], ids=["default", "transformer_fp16"])
def test_an_accurate_plan_passes_although_elementwise_max_rel_is_large(tmp_path, recipe):
    report = validate(tmp_path, 30.0, *recipe)
    assert report["passed"], report["candidates"][0]["reasons"]
    probs, offsets = metrics_of(report, "probs"), metrics_of(report, "offsets")
    for accurate in (probs, offsets):
        assert accurate.nonfinite == 0 and accurate.cosine > 0.9999 and accurate.rel_l2 < 0.01
    # The zero-mean output: its near-zero elements are off by far more than 10% of themselves ...
    assert offsets.max_rel > 0.15
    # ... which the former transformer bound rejected, although nothing else is wrong.
    passed, reasons = judge(offsets, Tolerance(cosine_min=0.9999, max_rel=0.1))
    assert not passed and reasons[0].startswith("max_rel")
    # The percentile sees that only a few elements are that far off.
    assert offsets.rel_p99 < offsets.max_rel / 3
    assert 0.0 < probs.rel_p99 <= probs.max_rel and probs.abs_p99 <= probs.max_abs


@pytest.mark.parametrize("recipe", [(), ("+recipe=transformer_fp16",)], ids=["default", "transformer_fp16"])
def test_a_plan_that_loses_the_logits_still_fails(tmp_path, recipe):
    report = validate(tmp_path, 3000.0, *recipe)
    assert not report["passed"]
    probs = metrics_of(report, "probs")
    assert probs.nonfinite == 0 and probs.rel_l2 > 0.1 and probs.cosine < 0.99
    reasons = report["candidates"][0]["reasons"]
    assert any(r.startswith("probs: rel_l2") for r in reasons) and any(r.startswith("probs: cosine") for r in reasons)
    assert not any(r.startswith("offsets:") for r in reasons)  # the regression head stays accurate
