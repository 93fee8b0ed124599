"""The benchmark's noise-aware accuracy verdict (bench/autocast/paired_accuracy.py) and issue 16's
per-model "done when" (bench/autocast/done_when.py), on numbers and on real ONNX graphs run by the
emulator."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.autocast.done_when import done_when_rows, print_done_when
from bench.autocast.output_facts import kept_float_io, reference_outputs, sample_metrics
from bench.autocast.paired_accuracy import BETTER, SAME, WORSE, paired_ratios, paired_verdict, sign_test_interval


def _binomial_below(n: int, k: int) -> float:
    return sum(math.comb(n, i) for i in range(k)) / 2.0**n


@pytest.mark.parametrize("n", [6, 7, 20, 48, 64])
def test_sign_test_interval_uses_the_widest_rank_within_the_tail(n):
    values = np.arange(n, dtype=float)  # the k-th order statistic is k - 1
    low, high, coverage = sign_test_interval(values, 0.95)
    k = int(low) + 1
    assert high == n - k
    assert _binomial_below(n, k) <= 0.025 < _binomial_below(n, k + 1)
    assert coverage == pytest.approx(1 - 2 * _binomial_below(n, k))
    assert coverage >= 0.95


def test_sign_test_interval_covers_the_median_as_often_as_it_says():
    rng = np.random.default_rng(7)
    trials, n = 2000, 24
    covered = 0
    for _ in range(trials):
        low, high, _ = sign_test_interval(rng.lognormal(0.0, 1.0, n))  # median exactly 1
        covered += low <= 1.0 <= high
    assert covered / trials >= 0.94


def test_too_few_samples_give_the_whole_range_with_its_true_coverage():
    # [min, max] of 3 values misses the median when all 3 fall on one side: 2 * 1/8.
    assert sign_test_interval(np.array([3.0, 1.0, 2.0])) == (1.0, 3.0, 0.75)


def test_a_minority_of_broken_samples_is_worse_whatever_the_median():
    """Review: 20 of 64 samples inf for trtpipe only, 44 slightly better, read 'better'."""
    verdict = paired_verdict(np.r_[np.full(20, np.inf), np.full(44, 0.9)], np.ones(64))
    assert (verdict.verdict, verdict.broken) == (WORSE, 20)


def test_losses_among_many_ties_are_worse():
    """Review: 40 bit-identical samples and 24 losses at ratio 2 read 'same within noise'."""
    ours = np.r_[np.ones(40), np.full(24, 2.0)]
    verdict = paired_verdict(ours, np.ones(64))
    assert (verdict.ties, verdict.losses, verdict.verdict) == (40, 24, WORSE)
    assert paired_verdict(np.ones(64), ours).verdict == BETTER
    assert paired_verdict(np.r_[np.ones(62), 2.0, 0.5], np.ones(64)).verdict == SAME


def test_identical_errors_are_the_same():
    errors = np.linspace(1e-4, 3e-4, 64)
    verdict = paired_verdict(errors, errors)
    assert (verdict.ratio, verdict.low, verdict.high, verdict.ties, verdict.verdict) == (1.0, 1.0, 1.0, 64, SAME)


def test_rounding_noise_either_way_is_rarely_called_worse():
    """Two equivalent plans: 'worse' at most as often as the interval's tail allows (<= 2.5 %)."""
    worse = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        base = rng.uniform(1e-4, 5e-4, 64)  # inputs differ in difficulty far more than the tools do
        ours, theirs = base * rng.lognormal(0.0, 0.05, 64), base * rng.lognormal(0.0, 0.05, 64)
        worse += paired_verdict(ours, theirs).verdict == WORSE
    assert worse / 400 <= 0.03


def test_a_systematic_two_percent_is_detected_both_ways():
    rng = np.random.default_rng(5)
    base = rng.uniform(1e-4, 5e-4, 64)
    noisy = base * rng.lognormal(0.0, 0.005, 64)
    worse = paired_verdict(noisy * 1.02, base)
    assert worse.verdict == WORSE and 1.0 < worse.low <= worse.ratio <= worse.high
    assert paired_verdict(base, noisy * 1.02).verdict == BETTER


def test_non_finite_errors_lose_and_two_broken_outputs_tie():
    ratios = paired_ratios([np.inf, 1e-4, np.nan, 0.0], [1e-4, np.inf, np.inf, 0.0])
    assert list(ratios) == [np.inf, 0.0, 1.0, 1.0]
    assert paired_verdict([np.inf] * 10, [1e-4] * 10).verdict == WORSE


def _dense_model(low_precision: bool) -> onnx.ModelProto:
    """y = tanh(x W + b), [1, 64]: in FP32, or computed in FP16 between two Casts."""
    rng = np.random.default_rng(11)
    weight, bias = rng.normal(0, 0.3, (64, 64)), rng.normal(0, 0.1, 64)
    kind, np_type = (TensorProto.FLOAT16, np.float16) if low_precision else (TensorProto.FLOAT, np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["xc"], "cast_in", to=kind)] if low_precision else []
    first = "xc" if low_precision else "x"
    nodes += [helper.make_node("MatMul", [first, "W"], ["h"], "matmul"),
              helper.make_node("Add", ["h", "b"], ["a"], "add"),
              helper.make_node("Tanh", ["a"], ["t" if low_precision else "y"], "tanh")]
    if low_precision:
        nodes.append(helper.make_node("Cast", ["t"], ["y"], "cast_out", to=TensorProto.FLOAT))
    graph = helper.make_graph(
        nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(weight.astype(np_type), "W"), numpy_helper.from_array(bias.astype(np_type), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_fp32_plan_beats_an_fp16_plan_on_every_emulated_sample():
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.uniform(-2, 2, (1, 64)).astype(np.float32)} for _ in range(32)]
    references = reference_outputs(_dense_model(False), feeds)
    exact = [m.rel_l2 for m in sample_metrics(references, _dense_model(False), feeds)["y"]]
    rounded = [m.rel_l2 for m in sample_metrics(references, _dense_model(True), feeds)["y"]]
    assert all(e > 1e-5 for e in rounded)
    verdict = paired_verdict(exact, rounded)
    assert verdict.verdict == BETTER and verdict.wins == 32
    assert paired_verdict(rounded, exact).verdict == WORSE


def test_the_cast_allowance_is_read_off_both_outputs(tmp_path):
    source = _dense_model(False)
    half = onnx.ModelProto()
    half.CopyFrom(source)
    half.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16  # AutoCast's defaults: FP16 I/O
    paths = {}
    for name, model in (("ours", source), ("theirs", half)):
        paths[name] = tmp_path / f"{name}.onnx"
        onnx.save(model, str(paths[name]))
    assert kept_float_io(source, paths["ours"], paths["theirs"]) == ["y"]  # x stays FP32 in both
    assert kept_float_io(source, paths["ours"], paths["ours"]) == []
    assert kept_float_io(source, paths["ours"], None) is None


def _result(casts: int, casts_added: int, autocast_casts: int, kept: list[str], ours, theirs) -> dict:
    side = {"status": "ok", "rel_l2_samples": {"y": ours}, "casts": casts, "casts_added": casts_added}
    return {"model": "m", "kept_float_io": kept, "trtpipe": side,
            "autocast_defaults": {"status": "ok", "casts": autocast_casts, "rel_l2_samples": {"y": theirs}}}


def test_done_when_passes_within_the_allowance_and_fails_beyond_it():
    errors = list(np.linspace(1e-4, 2e-4, 16))
    assert done_when_rows([_result(6, 6, 4, ["x", "y"], errors, errors)])[0]["verdict"] == "PASS"
    row = done_when_rows([_result(7, 7, 4, ["x", "y"], errors, errors)])[0]
    assert (row["verdict"], row["casts_ok"]) == ("FAIL", False)
    # The raw export's own Casts count too (AutoCast re-decides them): 6 kept as authored.
    authored = done_when_rows([_result(7, 1, 4, ["x", "y"], errors, errors)])[0]
    assert (authored["verdict"], authored["written"], authored["authored"]) == ("FAIL", 7, 6)
    assert done_when_rows([_result(6, 1, 4, ["x", "y"], errors, errors)])[0]["verdict"] == "PASS"


def test_done_when_fails_a_systematically_less_accurate_output_and_skips_missing_runs():
    errors = np.linspace(1e-4, 2e-4, 16)
    row = done_when_rows([_result(2, 2, 4, [], list(errors * 1.05), list(errors))])[0]
    assert (row["verdict"], row["worse"]) == ("FAIL", ["y"])
    skipped = _result(2, 2, 4, [], list(errors), list(errors))
    skipped["autocast_defaults"] = {"status": "skipped (> 24 layers)"}
    assert done_when_rows([skipped])[0]["verdict"] == "n/a"


def test_a_run_that_compared_nothing_or_where_trtpipe_failed_does_not_pass(capsys):
    errors = list(np.linspace(1e-4, 2e-4, 16))
    skipped = _result(2, 2, 4, [], errors, errors)
    skipped["autocast_defaults"] = {"status": "unavailable (modelopt not installed)"}
    assert print_done_when([skipped]) is False
    failed = _result(2, 2, 4, [], errors, errors)
    failed["trtpipe"] = {"status": "failed (UserError: ...)"}
    assert done_when_rows([failed])[0]["verdict"] == "FAIL"
    assert print_done_when([failed, _result(2, 2, 4, [], errors, errors)]) is False
    assert "m                FAIL (trtpipe failed" in capsys.readouterr().out
