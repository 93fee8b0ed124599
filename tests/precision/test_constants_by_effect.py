"""Every constant is judged by its effect (auto_constants.py, issue 21 item 7): a 16-channel first Conv
whose bias holds values of ~1e-9 next to normal ones, and a BatchNormalization whose variance holds
entries of ~1e-9, used to stay FP32 because any flushed value of a small tensor counted. Their flush
changes nothing measurable: FP16. A BatchNormalization whose tiny variances really scale their channels
(epsilon 1e-12, channels of that size) stays FP32, with the measured change in its reason."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.precision.graphs import make_model, value
from tests.precision.test_stored_tensors import emulated, run_stage
from tests.precision.test_underflow import REL_L2, rel_l2
from trtpipe.precision.materialize.materialize import materialize

RNG = np.random.default_rng(21)
CHANNELS = 16


def _array(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.float32), name)


def first_conv_with_tiny_bias():
    """A full-resolution first Conv (3 -> 16 channels, 3x3) whose bias holds 1e-9 values, then Relu and a
    second Conv."""
    bias = RNG.standard_normal(CHANNELS) * 0.1
    bias[[2, 7, 11]] = [1e-9, -2e-9, 5e-10]
    inits = [_array("w1", RNG.standard_normal([CHANNELS, 3, 3, 3]) * 0.2), _array("b1", bias),
             _array("w2", RNG.standard_normal([8, CHANNELS, 3, 3]) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="first_conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="second_conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, [value("x", [1, 3, 64, 64])], [value("y", [1, 8, 64, 64])], inits)
    return model, {"x": RNG.uniform(-1, 1, [1, 3, 64, 64]).astype(np.float32)}


def conv_batchnorm(epsilon: float, channel_scale: np.ndarray, variance: np.ndarray):
    """Conv (3 -> 16) -> BatchNormalization(variance, epsilon) -> Relu -> Conv; the first Conv's output
    channels have the size `channel_scale` (the statistics BatchNormalization learnt)."""
    w1 = RNG.standard_normal([CHANNELS, 3, 3, 3]) * 0.2 * channel_scale[:, None, None, None]
    inits = [_array("w1", w1), _array("gamma", RNG.uniform(0.5, 1.5, CHANNELS)),
             _array("beta", RNG.standard_normal(CHANNELS) * 0.1), _array("mean", np.zeros(CHANNELS)),
             _array("var", variance), _array("w2", RNG.standard_normal([8, CHANNELS, 3, 3]) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="first_conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"], name="bn",
                              epsilon=epsilon),
             helper.make_node("Relu", ["bn"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="second_conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, [value("x", [1, 3, 32, 32])], [value("y", [1, 8, 32, 32])], inits)
    return model, {"x": RNG.uniform(-1, 1, [1, 3, 32, 32]).astype(np.float32)}


def mixed_variance() -> np.ndarray:
    variance = RNG.uniform(0.5, 2.0, CHANNELS)
    variance[[1, 5, 9, 13]] = [1e-9, 2e-9, 5e-10, 1e-9]  # dead channels
    return variance


def batchnorm_where_the_flush_is_nil():
    """epsilon 1e-5 dominates the 1e-9 variances: flushing them moves those channels by 1e-4 relative."""
    return conv_batchnorm(1e-5, np.ones(CHANNELS), mixed_variance())


def batchnorm_where_the_flush_is_real():
    """epsilon 1e-12: the dead channels (size ~3e-5) are divided by sqrt(1e-9); flushed, by 1e-6."""
    variance = mixed_variance()
    return conv_batchnorm(1e-12, np.sqrt(variance), variance)


def _flushing(plan, constant):
    return next(e for e in plan["constants"]["flushing"] if e["constant"] == constant)


@pytest.mark.parametrize("build, constant", [(first_conv_with_tiny_bias, "b1"),
                                             (batchnorm_where_the_flush_is_nil, "var")])
def test_a_constant_whose_flush_changes_nothing_keeps_its_consumer_fp16(tmp_path, build, constant):
    model, feeds = build()
    candidate, plan = run_stage(tmp_path, model, feeds)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert all(n["precision"] == "fp16" for n in nodes.values()), {n: v["reason"] for n, v in nodes.items()}
    entry = _flushing(plan, constant)
    assert entry["decision"] == "converted to fp16" and entry["values_flushed"] >= 3
    assert plan["totals"]["low_precision_flop_share"] == 1.0
    expected, got = emulated(model, candidate, feeds)
    assert rel_l2(got, expected) < REL_L2


def test_the_batchnorm_variance_is_measured_not_judged_by_its_share(tmp_path):
    # The 1e-9 variances are ~1e-9 of the variance's L2 norm: negligible for a weight, but a variance divides.
    model, feeds = batchnorm_where_the_flush_is_nil()
    _, plan = run_stage(tmp_path, model, feeds)
    [consumer] = _flushing(plan, "var")["consumers"]
    assert "measured on the sample inputs" in consumer["measure"] and consumer["output_change"] < 1e-3


def test_a_variance_whose_flush_is_real_keeps_the_batchnorm_fp32(tmp_path):
    model, feeds = batchnorm_where_the_flush_is_real()
    candidate, plan = run_stage(tmp_path, model, feeds)
    bn = next(n for n in plan["nodes"] if n["name"] == "bn")
    assert bn["precision"] == "fp32" and bn["reason"].startswith("constant var flushes to 0 in fp16")
    assert "measured on the sample inputs" in bn["reason"]
    [consumer] = _flushing(plan, "var")["consumers"]
    assert consumer["keeps_fp32"] and consumer["output_change"] > 0.1
    expected, got = emulated(model, candidate, feeds)
    assert rel_l2(got, expected) < REL_L2
    everything_fp16 = {n["name"]: "fp16" for n in plan["nodes"]}
    _, naive = emulated(model, materialize(model, everything_fp16, keep_io_types=True)[0], feeds)
    assert rel_l2(naive, expected) > REL_L2  # the protection is needed
    # Without data it cannot be measured: a divisor stays FP32.
    _, plan = run_stage(tmp_path / "no_data", model, feeds, auto={"max_abs": None})
    bn = next(n for n in plan["nodes"] if n["name"] == "bn")
    assert bn["precision"] == "fp32" and "divides by it" in bn["reason"]
