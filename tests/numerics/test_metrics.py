"""(e) Metrics on hand-computed arrays, and the comparator's verdicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trtpipe.errors import UserError
from trtpipe.validate.compare import (
    DEFAULT_TOLERANCE, Tolerance, Tolerances, compare_candidate, judge, rel_l2_for_cosine,
)
from trtpipe.numerics.metrics import OutputMetrics, output_metrics, percentile, worst_metrics

ALL_METRICS = {"max_abs", "mean_abs", "max_rel", "abs_p99", "rel_p99", "rel_l2", "cosine", "psnr", "nonfinite",
               "ref_nonfinite", "ref_nonfinite_mismatch", "pixels_off_8bit", "argmax_agree"}


def measured(**values) -> OutputMetrics:
    """OutputMetrics of an accurate output, with `values` replaced."""
    accurate = dict(max_abs=0.0, mean_abs=0.0, max_rel=0.0, abs_p99=0.0, rel_p99=0.0, rel_l2=0.0,
                    cosine=1.0, psnr=None, nonfinite=0)
    return OutputMetrics(**{**accurate, **values})


def image(low=0.0, high=1.0, seed=0):
    return np.random.RandomState(seed).uniform(low, high, (1, 3, 8, 8)).astype(np.float32)


def test_psnr_of_a_known_mse():
    reference = image()
    metrics = output_metrics(reference, reference + np.float32(0.01))  # mse 1e-4, peak 1 (a [0, 1] image)
    assert metrics.psnr == pytest.approx(40.0, abs=1e-3)
    assert metrics.max_abs == pytest.approx(0.01, rel=1e-4) and metrics.mean_abs == pytest.approx(0.01, rel=1e-4)
    # Outside [0, 1] the peak is the dynamic range: 10*log10(range^2 / mse).
    wide = image(-1.0, 3.0)
    wide[0, 0, 0, 0], wide[0, 0, 0, 1] = -1.0, 3.0  # range exactly 4
    assert output_metrics(wide, wide + np.float32(0.5)).psnr == pytest.approx(10 * math.log10(16 / 0.25), abs=1e-4)
    assert output_metrics(reference, reference).psnr == math.inf
    assert output_metrics(reference[0, 0], reference[0, 0]).psnr is None  # 2-D: not an image


def test_cosine_of_orthogonal_parallel_and_zero_vectors():
    assert output_metrics(np.array([1.0, 0.0]), np.array([0.0, 1.0])).cosine == pytest.approx(0.0)
    assert output_metrics(np.array([1.0, 2.0]), np.array([2.0, 4.0])).cosine == pytest.approx(1.0)
    assert output_metrics(np.array([1.0, 2.0]), np.array([-1.0, -2.0])).cosine == pytest.approx(-1.0)
    assert output_metrics(np.zeros(3), np.zeros(3)).cosine == 1.0
    assert output_metrics(np.zeros(3), np.ones(3)).cosine == 0.0


def test_max_rel_with_a_zero_reference_uses_the_scale_relative_eps():
    # eps = 1e-2 * max|ref| = 1.0: the zero element is judged by 0.01 / 1.0, not 0.01 / 0.
    metrics = output_metrics(np.array([0.0, 100.0]), np.array([0.01, 100.0]))
    assert metrics.max_rel == pytest.approx(0.01)
    # An ordinary element: plain relative error.
    assert output_metrics(np.array([10.0, 100.0]), np.array([10.0, 101.0])).max_rel == pytest.approx(0.01)
    # All-zero reference: eps is FP32's smallest normal, the error is huge but finite.
    all_zero = output_metrics(np.zeros(2), np.array([1e-3, 0.0]))
    assert math.isfinite(all_zero.max_rel) and all_zero.max_rel > 1e30


def test_nonfinite_candidate_values_are_counted_and_serialised_as_strings():
    reference = np.array([[1.0, 2.0], [3.0, np.inf]])  # the reference's own inf is no target
    candidate = np.array([[np.nan, 2.0], [np.inf, np.inf]])
    metrics = output_metrics(reference, candidate)
    assert metrics.nonfinite == 2
    assert metrics.max_abs == math.inf and metrics.mean_abs == math.inf and math.isnan(metrics.cosine)
    data = json.loads(json.dumps(metrics.to_json(), allow_nan=False))
    assert data == {"max_abs": "inf", "mean_abs": "inf", "max_rel": "inf", "abs_p99": "inf", "rel_p99": "inf",
                    "rel_l2": "inf", "cosine": "nan", "psnr": None, "nonfinite": 2,
                    "ref_nonfinite": 1, "ref_nonfinite_mismatch": 0,  # the reference's inf, matched
                    # row 0: the NaN row disagrees; row 1: the reference's +inf (index 1) is its
                    # maximum, the candidate's two infs pick index 0 (3.0): disagrees
                    "pixels_off_8bit": None, "argmax_agree": 0.0}
    assert OutputMetrics.from_json(data).nonfinite == 2


def test_judge_names_the_failing_metric_with_both_values():
    metrics = measured(max_abs=0.5, mean_abs=0.1, max_rel=0.2, cosine=0.98, psnr=31.5)
    passed, reasons = judge(metrics, Tolerance(max_abs=0.1, max_rel=0.5, cosine_min=0.99, psnr_min=40))
    assert not passed
    assert reasons == ["max_abs 0.5 exceeds max_abs 0.1", "cosine 0.98 is below cosine_min 0.99",
                       "psnr 31.5 is below psnr_min 40"]
    assert judge(metrics, Tolerance()) == (True, [])


def test_nonfinite_fails_whatever_the_tolerance():
    metrics = measured(max_abs=math.inf, mean_abs=math.inf, max_rel=math.inf, abs_p99=math.inf, rel_p99=math.inf,
                       rel_l2=math.inf, cosine=math.nan, nonfinite=3)
    passed, reasons = judge(metrics, Tolerance())
    assert not passed and reasons[0].startswith("nonfinite 3")
    # The NaN cosine is not reported twice; the infinite rel_l2 is an ordinary excess.
    assert judge(metrics, DEFAULT_TOLERANCE)[1][1:] == ["rel_l2 inf exceeds rel_l2 0.044"]


def test_per_output_override_replaces_only_what_it_sets():
    tolerances = Tolerances.from_mapping({"max_rel": 0.1}, {"logits": {"max_abs": 0.05, "cosine_min": 0.9}})
    assert tolerances.for_output("logits") == Tolerance(max_abs=0.05, max_rel=0.1, rel_l2=0.044, cosine_min=0.9,
                                                        psnr_min=40.0)
    assert tolerances.for_output("other") == Tolerance(max_rel=0.1, rel_l2=0.044, cosine_min=0.999, psnr_min=40.0)
    percentiles = Tolerances.from_mapping({}, {"probs": {"abs_p99": 1e-3, "rel_p99": 0.05, "rel_l2": None}})
    assert percentiles.for_output("probs") == Tolerance(abs_p99=1e-3, rel_p99=0.05, rel_l2=0.044,
                                                        cosine_min=0.999, psnr_min=40.0)
    with pytest.raises(UserError, match="unknown tolerance key.*cosine"):
        Tolerances.from_mapping({"cosine": 0.9})


def test_worst_case_across_iterations():
    good = measured(max_abs=0.1, mean_abs=0.01, max_rel=0.2, abs_p99=0.05, rel_p99=0.01, rel_l2=0.002,
                    cosine=0.9999, psnr=50.0)
    bad = measured(max_abs=0.3, mean_abs=0.005, max_rel=0.1, abs_p99=0.01, rel_p99=0.02, rel_l2=0.001,
                   cosine=0.99, psnr=45.0, nonfinite=2)
    assert worst_metrics([good, bad]) == measured(max_abs=0.3, mean_abs=0.01, max_rel=0.2, abs_p99=0.05,
                                                  rel_p99=0.02, rel_l2=0.002, cosine=0.99, psnr=45.0, nonfinite=2)
    undefined = measured(max_abs=0.1, mean_abs=0.01, max_rel=0.2, cosine=math.nan)
    assert math.isnan(worst_metrics([good, undefined]).cosine)


def test_compare_candidate_aggregates_iterations_and_reports_missing_or_misshapen_outputs():
    reference = [{"y": np.ones(4), "img": image()} for _ in range(2)]
    candidate = [{"y": np.ones(4), "img": image()}, {"y": np.array([1, 1, 1, np.nan]), "img": image()}]
    verdict = compare_candidate("fp16", reference, candidate, ["y", "img"])
    assert not verdict.passed and verdict.iterations == 2
    assert verdict.outputs["img"].passed and verdict.outputs["y"].metrics.nonfinite == 1
    assert verdict.reasons[0].startswith("y: nonfinite 1")
    report = verdict.to_json()
    assert set(report["outputs"]["img"]) == ALL_METRICS
    json.dumps(report, allow_nan=False)

    missing = compare_candidate("c", reference[:1], [{"img": image()}], ["y"])
    assert missing.reasons == ["y: the candidate has no output 'y'"]
    misshapen = compare_candidate("c", reference[:1], [{"y": np.ones(5)}], ["y"])
    assert "differs from the reference's [4]" in misshapen.reasons[0]
    assert misshapen.to_json()["outputs"]["y"] is None


def test_rel_l2_is_the_error_norm_relative_to_the_reference_norm_and_sees_a_wrong_scale():
    assert output_metrics(np.array([3.0, 4.0]), np.array([3.0, 4.5])).rel_l2 == pytest.approx(0.5 / 5.0)
    reference = np.random.RandomState(0).normal(size=1000)
    scaled = output_metrics(reference, 1.05 * reference)  # a wrong scale: cosine cannot see it
    assert scaled.cosine == pytest.approx(1.0) and scaled.rel_l2 == pytest.approx(0.05)
    assert not judge(scaled, DEFAULT_TOLERANCE)[0]
    assert judge(scaled, DEFAULT_TOLERANCE)[1] == ["rel_l2 0.05 exceeds rel_l2 0.044"]
    # All-zero reference: 0 when the candidate is zero too, else 1.0 (all of it is error), never inf/NaN.
    assert output_metrics(np.zeros(3), np.zeros(3)).rel_l2 == 0.0
    assert output_metrics(np.zeros(3), np.array([0.0, 1e-9, 0.0])).rel_l2 == 1.0


def test_the_default_rel_l2_bound_is_the_error_the_cosine_bound_allows():
    # An error orthogonal to the reference of relative norm r has cosine 1/sqrt(1 + r^2).
    reference = np.array([1.0, 0.0])
    r = rel_l2_for_cosine(DEFAULT_TOLERANCE.cosine_min)
    orthogonal = output_metrics(reference, np.array([1.0, r]))
    assert orthogonal.cosine == pytest.approx(DEFAULT_TOLERANCE.cosine_min)
    assert orthogonal.rel_l2 == pytest.approx(r)
    assert 0.9 * r < DEFAULT_TOLERANCE.rel_l2 <= r


def test_percentile_is_numpy_s_linear_quantile_and_keeps_inf_as_the_largest_value():
    values = np.random.RandomState(1).exponential(size=1001)
    assert percentile(values, 0.99) == pytest.approx(np.quantile(values, 0.99), rel=1e-12)
    assert percentile(np.arange(100.0), 0.99) == pytest.approx(98.01)
    assert percentile(np.array([2.0]), 0.99) == 2.0
    one_inf = np.append(np.arange(999.0), np.inf)  # position 989.01: between 989 and 990, both finite
    assert percentile(one_inf, 0.99) == pytest.approx(989.01)
    many_inf = np.append(np.arange(980.0), np.full(20, np.inf))  # 2% non-finite
    assert percentile(many_inf, 0.99) == math.inf


def test_p99_ignores_the_worst_percent_and_rel_p99_keeps_the_max_rel_floor():
    reference = np.linspace(1.0, 2.0, 1000)
    candidate = reference * (1 + 1e-3)
    candidate[:5] = reference[:5] * 1.5  # 0.5% of the elements badly off
    metrics = output_metrics(reference, candidate)
    assert metrics.max_rel == pytest.approx(0.5)
    assert metrics.rel_p99 == pytest.approx(1e-3, rel=1e-6) and metrics.abs_p99 < 2.1e-3
    # Near-zero elements (below 1% of the scale) are judged against 1% of the scale, as in max_rel.
    zeros = output_metrics(np.array([0.0] * 50 + [100.0] * 50), np.array([0.01] * 50 + [100.0] * 50))
    assert zeros.rel_p99 == pytest.approx(0.01) and zeros.rel_p99 <= zeros.max_rel


def test_p99_and_rel_l2_agree_with_polygraphy_s_quantile_error_stat_and_snr():
    from polygraphy.comparator import IterationResult, SimpleCompareFunc, SnrCompareFunc

    rng = np.random.RandomState(2)
    reference = rng.uniform(0.5, 2.0, (8, 125)).astype(np.float32)  # no element below 1% of the scale
    candidate = (reference * (1 + rng.normal(0, 1e-3, reference.shape))).astype(np.float32)
    compare = SimpleCompareFunc(check_error_stat="quantile", error_quantile=0.99)
    result = compare(IterationResult({"y": candidate}, runner_name="candidate"),
                     IterationResult({"y": reference}, runner_name="reference"))["y"]
    ours = output_metrics(reference, candidate)
    assert ours.abs_p99 == pytest.approx(float(result.quantile_absdiff), rel=1e-5)
    assert ours.rel_p99 == pytest.approx(float(result.quantile_reldiff), rel=1e-5)
    # Polygraphy's SNR (signal: the first result) is rel_l2 in decibels: -20 log10(rel_l2).
    snr = SnrCompareFunc()(IterationResult({"y": reference}, runner_name="reference"),
                           IterationResult({"y": candidate}, runner_name="candidate"))["y"].snr
    assert ours.rel_l2 == pytest.approx(10 ** (-float(snr) / 20), rel=1e-5)
