"""(e) Metrics on hand-computed arrays, and the comparator's verdicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trtpipe.errors import UserError
from trtpipe.validate.compare import (
    DEFAULT_TOLERANCE, Tolerance, Tolerances, compare_candidate, judge,
)
from trtpipe.numerics.metrics import OutputMetrics, output_metrics, worst_metrics


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
    assert data == {"max_abs": "inf", "mean_abs": "inf", "max_rel": "inf", "cosine": "nan",
                    "psnr": None, "nonfinite": 2}
    assert OutputMetrics.from_json(data).nonfinite == 2


def test_judge_names_the_failing_metric_with_both_values():
    metrics = OutputMetrics(max_abs=0.5, mean_abs=0.1, max_rel=0.2, cosine=0.98, psnr=31.5, nonfinite=0)
    passed, reasons = judge(metrics, Tolerance(max_abs=0.1, max_rel=0.5, cosine_min=0.99, psnr_min=40))
    assert not passed
    assert reasons == ["max_abs 0.5 exceeds max_abs 0.1", "cosine 0.98 is below cosine_min 0.99",
                       "psnr 31.5 is below psnr_min 40"]
    assert judge(metrics, Tolerance()) == (True, [])


def test_nonfinite_fails_whatever_the_tolerance():
    metrics = OutputMetrics(math.inf, math.inf, math.inf, math.nan, None, 3)
    passed, reasons = judge(metrics, Tolerance())
    assert not passed and reasons[0].startswith("nonfinite 3")
    assert len(judge(metrics, DEFAULT_TOLERANCE)[1]) == 1  # the NaN cosine is not reported twice


def test_per_output_override_replaces_only_what_it_sets():
    tolerances = Tolerances.from_mapping({"max_rel": 0.1}, {"logits": {"max_abs": 0.05, "cosine_min": 0.9}})
    assert tolerances.for_output("logits") == Tolerance(max_abs=0.05, max_rel=0.1, cosine_min=0.9, psnr_min=40.0)
    assert tolerances.for_output("other") == Tolerance(max_rel=0.1, cosine_min=0.999, psnr_min=40.0)
    with pytest.raises(UserError, match="unknown tolerance key.*cosine"):
        Tolerances.from_mapping({"cosine": 0.9})


def test_worst_case_across_iterations():
    good = OutputMetrics(0.1, 0.01, 0.2, 0.9999, 50.0, 0)
    bad = OutputMetrics(0.3, 0.005, 0.1, 0.99, 45.0, 2)
    assert worst_metrics([good, bad]) == OutputMetrics(0.3, 0.01, 0.2, 0.99, 45.0, 2)
    undefined = OutputMetrics(0.1, 0.01, 0.2, math.nan, None, 0)
    assert math.isnan(worst_metrics([good, undefined]).cosine)


def test_compare_candidate_aggregates_iterations_and_reports_missing_or_misshapen_outputs():
    reference = [{"y": np.ones(4), "img": image()} for _ in range(2)]
    candidate = [{"y": np.ones(4), "img": image()}, {"y": np.array([1, 1, 1, np.nan]), "img": image()}]
    verdict = compare_candidate("fp16", reference, candidate, ["y", "img"])
    assert not verdict.passed and verdict.iterations == 2
    assert verdict.outputs["img"].passed and verdict.outputs["y"].metrics.nonfinite == 1
    assert verdict.reasons[0].startswith("y: nonfinite 1")
    report = verdict.to_json()
    assert set(report["outputs"]["img"]) == {"max_abs", "mean_abs", "max_rel", "cosine", "psnr", "nonfinite"}
    json.dumps(report, allow_nan=False)

    missing = compare_candidate("c", reference[:1], [{"img": image()}], ["y"])
    assert missing.reasons == ["y: the candidate has no output 'y'"]
    misshapen = compare_candidate("c", reference[:1], [{"y": np.ones(5)}], ["y"])
    assert "differs from the reference's [4]" in misshapen.reasons[0]
    assert misshapen.to_json()["outputs"]["y"] is None
