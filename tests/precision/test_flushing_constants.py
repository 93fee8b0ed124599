"""Constants with values that flush to zero in FP16 (auto_constants.py, flush_effect.py): judged by
the measured effect on the consumer's output (or the flushed share of the weight's L2 norm without
data), recorded in the plan; real overflow (the -3.4e38 mask) stays protected."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.precision.graphs import make_model, value
from tests.precision.models import precision_config
from tests.precision.test_auto_rules import builtin_plan, plan
from tests.precision.test_stored_tensors import emulated, run_stage, without_check
from trtpipe.precision.auto.auto_constants import EFFECT_LIMIT, MEASURE_FROM
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision

RNG = np.random.default_rng(11)


def matmul_with(w: np.ndarray, x_scale: float = 1.0):
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="wT", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["mm"], name="fc"),
             helper.make_node("Relu", ["mm"], ["y"], name="act")]
    model = make_model(nodes, [value("x", [4, w.shape[1]])], [value("y", [4, w.shape[0]])],
                       [numpy_helper.from_array(w.astype(np.float32), "w")])
    return model, {"x": (RNG.standard_normal([4, w.shape[1]]) * x_scale).astype(np.float32)}


def normal_weight_with_denormals() -> np.ndarray:
    w = RNG.standard_normal([16, 32]) * 0.2
    w.flat[[3, 77, 300]] = [1e-9, -1e-9, 1e-40]  # below FP16's subnormals (one an FP32 denormal)
    return w


def tiny_weight() -> np.ndarray:
    return RNG.uniform(-2.5e-8, 2.5e-8, [16, 32])  # every value flushes (below 2^-25)


def constants_record(model, feeds=None, **config):
    name_nodes_as_parser_does(model)
    notes: dict = {}
    decisions, _ = plan_precision(network_from_model(model), precision_config(**config),
                                  [feeds] if feeds else None, notes)
    return decisions, notes["constants"]["flushing"]


@pytest.mark.parametrize("with_data", [True, False])
def test_a_few_denormals_do_not_keep_the_matmul_fp32(tmp_path, with_data):
    model, feeds = matmul_with(normal_weight_with_denormals())
    decisions, flushing = constants_record(model, feeds if with_data else None)
    assert decisions["fc"].precision == "fp16"
    [entry] = flushing
    assert entry["constant"] == "w" and entry["values_flushed"] == 3 and entry["decision"] == "converted to fp16"
    [consumer] = entry["consumers"]
    assert consumer["node"] == "fc" and not consumer["keeps_fp32"]
    assert "negligible, not measured" in consumer["measure"] and entry["flushed_share_of_l2_norm"] < MEASURE_FROM
    # And the converted MatMul is accurate under the faithful emulation.
    candidate, document = run_stage(tmp_path, model, feeds)
    assert document["constants"]["flushing"][0]["decision"] == "converted to fp16"
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2 * np.abs(expected).max())


@pytest.mark.parametrize("with_data", [True, False])
def test_a_small_weight_with_flushing_entries_is_measured(tmp_path, with_data):
    # Values ~1e-4 (fp16 subnormals, kept) and 50 entries of ~2e-8 (flushed): 6e-5 of the L2 norm,
    # enough to be measured; the measured change of the MatMul's output decides.
    w = RNG.choice([-1, 1], [16, 32]) * RNG.uniform(0.5e-4, 1.5e-4, [16, 32])
    w.flat[RNG.choice(w.size, 50, replace=False)] = 2e-8
    model, feeds = matmul_with(w, x_scale=100.0)
    decisions, flushing = constants_record(model, feeds if with_data else None)
    assert decisions["fc"].precision == "fp16"
    [consumer] = flushing[0]["consumers"]
    assert MEASURE_FROM <= flushing[0]["flushed_share_of_l2_norm"] < EFFECT_LIMIT
    if with_data:  # measured through the Transpose, on the sample inputs
        assert "measured on the sample inputs" in consumer["measure"]
        assert 0 < consumer["output_change"] < EFFECT_LIMIT
    else:
        assert "not measured: no sample data" in consumer["measure"]


@pytest.mark.parametrize("with_data", [True, False])
def test_a_weight_that_flushes_entirely_keeps_the_matmul_fp32(tmp_path, with_data):
    model, feeds = matmul_with(tiny_weight(), x_scale=1e4)  # large inputs: the output (~5e-4) fits fp16
    decisions, flushing = constants_record(model, feeds if with_data else None)
    fc = decisions["fc"]
    assert fc.precision == "fp32" and fc.reason.startswith("constant w flushes to 0 in fp16")
    assert ("measured on the sample inputs" in fc.reason) == with_data
    assert flushing[0]["decision"] == "consumers kept fp32"
    if with_data:
        assert flushing[0]["consumers"][0]["output_change"] == pytest.approx(1.0)
    # Converted anyway (constants=off), the output is all zeros: the protection is needed.
    candidate, _ = run_stage(tmp_path, model, feeds)
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2 * np.abs(expected).max())
    # (The stored-tensor check also keeps the Transpose's output, the weight moved, FP32: put back in fp16.)
    _, naive_plan = run_stage(tmp_path / "naive", model, feeds, auto={"constants": "off"})
    naive = without_check(model, naive_plan)
    assert not np.abs(emulated(model, naive, feeds)[1]).any() and np.abs(expected).any()


@pytest.mark.parametrize("reader", ["Relu", "Log"])
def test_a_flushing_epsilon_is_judged_by_its_effect_unless_it_guards(reader):
    # Added to what Relu reads, a 1e-12 epsilon changes nothing measurable: fp16 (issue 21 item 7). Added
    # to what Log reads, it guards against zeros the samples may not contain: its Add stays fp32.
    x = value("x", [2, 4])
    eps = numpy_helper.from_array(np.array(1e-12, np.float32), "eps")
    nodes = [helper.make_node("Add", ["x", "eps"], ["s"], name="add_eps"),
             helper.make_node(reader, ["s"], ["y"], name="reader")]
    model = make_model(nodes, [x], [value("y", [2, 4])], [eps])
    feeds = {"x": RNG.uniform(0.5, 2.0, [2, 4]).astype(np.float32)}
    decisions, flushing = constants_record(model, feeds)
    [consumer] = flushing[0]["consumers"]
    if reader == "Relu":
        assert decisions["add_eps"].precision == "fp16" and not consumer["keeps_fp32"]
        assert consumer["output_change"] == 0.0 and "measured on the sample inputs" in consumer["measure"]
    else:
        assert decisions["add_eps"].precision == "fp32" and "guards against zeros" in decisions["add_eps"].reason
        assert consumer["keeps_fp32"]
        # The Log it guards stays FP32 too: cast to fp16 between them, the epsilon would flush again (the
        # samples hold no value small enough for the stored-tensor check to see it).
        assert decisions["reader"].precision == "fp32" and "guarded by constant eps" in decisions["reader"].reason
        assert consumer["guarded_readers_kept_fp32"] == ["reader"]
    # Without data nothing is measured: an epsilon flushing entirely keeps its Add fp32 either way.
    decisions, _ = constants_record(model)
    assert decisions["add_eps"].precision == "fp32"


def test_the_attention_mask_is_still_protected_with_data():
    _, decisions = builtin_plan("transformer", auto={"normalization": False})
    mask_consumers = [n for n, d in decisions.items() if "3.4e+38" in d.reason]
    assert mask_consumers and all(decisions[n].precision == "fp32" for n in mask_consumers)


def test_the_record_is_empty_without_flushing_constants():
    model, _ = matmul_with(RNG.standard_normal([8, 8]) * 0.2)
    _, flushing = constants_record(model)
    assert flushing == []


def test_without_data_the_l2_share_decides_for_other_callers():
    # constant_decisions without data (the search's constants guard) decides by the L2 share.
    from trtpipe.precision.auto.auto_constants import constant_decisions

    model, _ = matmul_with(tiny_weight())
    name_nodes_as_parser_does(model)
    assert "fc" in constant_decisions(network_from_model(model), "fp16")
    model, _ = matmul_with(normal_weight_with_denormals())
    name_nodes_as_parser_does(model)
    assert constant_decisions(network_from_model(model), "fp16") == {}
    assert plan(model, auto={"max_abs": None})[1]["fc"].precision == "fp16"
