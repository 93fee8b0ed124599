"""The stored-tensor check judges the bottom of FP16's range too (underflow.py, issue 21 item 1).

Three models built here (underflow_models.py): an audio front end whose power spectrum is mostly below
FP16's smallest subnormal, a normalisation of tiny activations, a Reciprocal of small variances. Without
the check each plan gives inf/NaN under the faithful emulation (before this rule: every one failed
validation); with it the plan passes transformer_fp16's bound with at least 90% of FLOPs in FP16, and the
plan says why each node of the protected region is FP32."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.precision.graphs import make_model, value
from tests.precision.test_stored_tensors import emulated, run_stage
from tests.precision.underflow_models import audio_front_end, reciprocal_of_variances, tiny_normalisation
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.decisions import MATERIALIZE_AS

REL_L2 = 0.014  # transformer_fp16's bound (the default recipe's is 0.044)


def rel_l2(got, expected) -> float:
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def without_underflow_check(model, plan):
    """The plan with every node the underflow check moved put back in fp16 (what the plan was before it)."""
    moved = {e["node"] for e in plan["boundaries"]["kept_fp32"] if "underflow" in e}
    precision = {n["name"]: "fp16" if n["name"] in moved else MATERIALIZE_AS[n["precision"]] for n in plan["nodes"]}
    return materialize(model, precision, keep_io_types=True)[0]


CASES = {
    # model, the nodes that must be FP32, a text the underflow reasons hold. With an epsilon, the constants
    # rule keeps the Add and the Log (or Sqrt and Div) it guards FP32; the check keeps what computes their input.
    "audio_mul": (lambda: audio_front_end(), {"stft", "re_sq", "im_sq", "power", "log"}, "change what log computes"),
    "audio_pow": (lambda: audio_front_end(use_pow=True), {"stft", "re_sq", "im_sq", "power", "log"},
                  "change what log computes"),
    "audio_no_eps": (lambda: audio_front_end(eps=False), {"stft", "re_sq", "im_sq", "power", "log"},
                     "Log (log 0 = -inf)"),
    "tiny_norm": (tiny_normalisation, {"square", "variance", "std"}, "tiny throughout"),
    "reciprocal": (reciprocal_of_variances, {"square", "local_variance"}, "tiny throughout"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_tensors_keep_the_smallest_region_fp32(tmp_path, case):
    build, must_be_fp32, reason_part = CASES[case]
    model, feeds = build()
    candidate, plan = run_stage(tmp_path, model, feeds)
    expected, got = emulated(model, candidate, feeds)
    assert np.isfinite(got).all() and rel_l2(got, expected) < REL_L2
    nodes = {n["name"]: n for n in plan["nodes"]}
    boundaries = plan["boundaries"]
    assert boundaries["checked"] and boundaries["verified"] and boundaries["tensors_below_range"] > 0
    assert boundaries["underflow"]["limit"] == 1e-3 and boundaries["underflow"]["subnormal_below"] == 2.0**-14
    assert {n for n in must_be_fp32 if nodes[n]["precision"] != "fp32"} == set()
    reasons = " | ".join(e["underflow"] for e in boundaries["kept_fp32"] if "underflow" in e)
    assert reason_part in reasons
    assert all("underflow" in nodes[e["node"]]["reason"] for e in boundaries["kept_fp32"] if "underflow" in e)
    assert not boundaries["not_moved"]
    assert plan["totals"]["low_precision_flop_share"] >= 0.9  # the head (most FLOPs) stays FP16
    # Without the check the same plan is not finite, or fails the bound (before this rule, every plan was not
    # finite: the epsilon's Add alone was FP32, its output cast to fp16 for Log or Sqrt).
    _, naive = emulated(model, without_underflow_check(model, plan), feeds)
    assert not np.isfinite(naive).all() or rel_l2(naive, expected) > REL_L2


def test_the_audio_front_end_needs_more_than_its_log(tmp_path):
    # Keeping only Log FP32 (where the -inf shows) is not enough: the power spectrum it reads was
    # computed and stored in FP16, mostly flushed. The check reaches back to the framing Conv.
    model, feeds = audio_front_end()
    _, plan = run_stage(tmp_path, model, feeds)
    only_log = {n["name"]: "fp32" if n["name"] in ("log", "add_eps") else "fp16" for n in plan["nodes"]}
    expected, got = emulated(model, materialize(model, only_log, keep_io_types=True)[0], feeds)
    assert not np.isfinite(got).all() or rel_l2(got, expected) > REL_L2
    moved = {e["node"]: e for e in plan["boundaries"]["kept_fp32"]}
    assert moved["stft"]["kind"] == "output" and "change what log computes" in moved["stft"]["underflow"]


def test_normal_range_tensors_feeding_log_and_divisors_stay_fp16(tmp_path):
    # Log of a softmax-free positive tensor and a LayerNorm-like division, all in FP16's normal range.
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("Add", ["a", "one"], ["a1"], name="add_one"),
             helper.make_node("Log", ["a1"], ["l"], name="log"),
             helper.make_node("Sqrt", ["a1"], ["s"], name="sqrt"),
             helper.make_node("Div", ["l", "s"], ["y"], name="div")]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    model = make_model(nodes, [value("x", [4, 16])], [value("y", [4, 16])], [one])
    feeds = {"x": np.random.default_rng(0).standard_normal([4, 16]).astype(np.float32)}
    _, plan = run_stage(tmp_path, model, feeds)
    assert all(n["precision"] == "fp16" for n in plan["nodes"]), plan["nodes"]
    assert plan["boundaries"].get("tensors_below_range", 0) == 0 and plan["boundaries"]["kept_fp32"] == []


def test_without_data_the_plan_says_the_bottom_was_not_checked(tmp_path):
    model, feeds = reciprocal_of_variances()
    _, plan = run_stage(tmp_path, model, feeds, auto={"max_abs": None})
    assert plan["boundaries"]["checked"] is False and "NOT checked" in plan["boundaries"]["reason"]


def test_pow_with_a_negative_exponent_reads_no_flushed_zero(tmp_path):
    # |h| written as h² * Pow(h², -0.5) over normal activations: the few h² below 3e-8 (|h| < 1.7e-4) flush
    # to 0 in FP16, 0^-0.5 is inf and 0 * inf NaN. The squares are not tiny throughout: only the flush counts.
    rng = np.random.default_rng(25)  # 5 values of h² flush, the smallest |h| is 1.3e-4
    inits = [helper.make_tensor("minus_half", TensorProto.FLOAT, [], [-0.5]),
             helper.make_tensor("w", TensorProto.FLOAT, [64, 64], (rng.standard_normal(64 * 64) / 8).tolist()),
             helper.make_tensor("w2", TensorProto.FLOAT, [64, 64], (rng.standard_normal(64 * 64) / 8).tolist())]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Mul", ["h", "h"], ["h2"], name="square"),
             helper.make_node("Pow", ["h2", "minus_half"], ["inv_abs"], name="rsqrt"),
             helper.make_node("Mul", ["h2", "inv_abs"], ["magnitude"], name="abs"),
             helper.make_node("MatMul", ["magnitude", "w2"], ["y"], name="out")]
    model = make_model(nodes, [value("x", [256, 64])], [value("y", [256, 64])], inits)
    feeds = {"x": rng.standard_normal([256, 64]).astype(np.float32)}
    candidate, plan = run_stage(tmp_path, model, feeds)
    expected, got = emulated(model, candidate, feeds)
    assert np.isfinite(got).all() and rel_l2(got, expected) < REL_L2
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["square"]["precision"] == "fp32" and nodes["proj"]["precision"] == "fp16"
    assert "read by rsqrt: Pow with a negative exponent" in nodes["square"]["reason"]
    assert plan["totals"]["low_precision_flop_share"] == 1.0
    _, naive = emulated(model, without_underflow_check(model, plan), feeds)
    assert not np.isfinite(naive).all()
