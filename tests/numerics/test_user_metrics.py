"""The users' criteria (issue 21 item 5): `pixels_off_8bit` (an image judged after quantisation
to 8 bits) and `argmax_agree` (a classifier's decision), on arrays whose answers are worked
out by hand in the comments, and their bounds in the comparator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from trtpipe.api import compose

from trtpipe.numerics.metrics import OutputMetrics, argmax_agreement, output_metrics, pixels_off_8bit, worst_metrics
from trtpipe.search.trials import bound_ratio
from trtpipe.validate.compare import Tolerance, Tolerances, compare_candidate, judge

LEVEL = 1.0 / 255.0


def test_pixels_off_8bit_counts_moves_of_more_than_one_level_on_a_unit_image():
    # A [0, 1] reference: levels are round(255 x). 0.5 -> 127.5 -> 128 (round half to even),
    # 0.25 -> 63.75 -> 64, 0.0 -> 0, 1.0 -> 255.
    reference = np.array([0.0, 0.5, 1.0, 0.25]).reshape(1, 1, 2, 2)
    moves = np.array([0.0, 1.6, 0.0, -2.6]) * LEVEL  # 127.5 + 1.6 = 129.1 -> 129 (1 level: not off);
    candidate = reference + moves.reshape(1, 1, 2, 2)  # 63.75 - 2.6 = 61.15 -> 61 (3 levels: off)
    assert output_metrics(reference, candidate).pixels_off_8bit == pytest.approx(0.25)
    # Clipped as the image is saved: 1.0 + 5 levels is still 255, 0.0 - 5 levels still 0.
    clipped = reference + np.array([-5.0, 0.0, 5.0, 0.0]).reshape(1, 1, 2, 2) * LEVEL
    assert output_metrics(reference, clipped).pixels_off_8bit == 0.0


def test_pixels_off_8bit_quantises_over_the_reference_range_outside_zero_one():
    # Reference -1..3 (range 4): a level is 4/255. Levels: -1 -> 0, 3 -> 255, 1 -> 127.5 -> 128.
    reference = np.array([-1.0, 3.0, 1.0, 1.0]).reshape(1, 1, 1, 4)
    step = 4.0 / 255.0
    candidate = reference + np.array([0.0, 0.0, 1.4 * step, 2.2 * step]).reshape(1, 1, 1, 4)
    # 127.5 + 1.4 = 128.9 -> 129 (1 level), 127.5 + 2.2 = 129.7 -> 130 (2 levels: off): 1 of 4.
    assert pixels_off_8bit(reference.ravel(), candidate.ravel()) == pytest.approx(0.25)


def test_a_half_level_offset_is_under_the_old_psnr_bound_but_moves_no_pixel():
    """Every pixel 0.5 level off: PSNR = 20 log10(255 / 0.5) = 54.15 dB, below the 56.3 dB the
    nafnet recipe demanded, yet no 8-bit value moves by more than one level: the recipe's
    criterion (its bounds as composed) passes it."""
    reference = (np.arange(64, dtype=np.float64).reshape(1, 1, 8, 8) * 3.0 + 10.0) / 255.0
    candidate = reference + 0.5 * LEVEL
    metrics = output_metrics(reference, candidate)
    # peak 1 (a [0, 1] image): 10 log10(1 / (0.5/255)^2) = 20 log10(510) = 54.151 dB
    assert metrics.psnr == pytest.approx(20 * math.log10(510.0), abs=1e-6)
    assert metrics.pixels_off_8bit == 0.0
    assert not judge(metrics, Tolerance(psnr_min=56.3))[0]
    bounds = OmegaConf.to_container(compose(["+recipe=nafnet_fp16"]).validate.tolerance)
    assert judge(metrics, Tolerances.from_mapping(bounds).default)[0]
    # A localised failure the PSNR averages away: 1 pixel in 16 off by 4 levels is 55.1 dB
    # (mse (4/255)^2 / 16), within the PSNR bound, and 6.25% of the pixels: over the share.
    patchy = reference.copy()
    patchy.reshape(-1)[::16] += 4 * LEVEL
    failed = output_metrics(reference, patchy)
    assert failed.psnr == pytest.approx(10 * math.log10(16 * (255 / 4) ** 2), abs=1e-6)
    assert failed.pixels_off_8bit == pytest.approx(1 / 16)
    passed, reasons = judge(failed, Tolerances.from_mapping(bounds).default)
    assert not passed and reasons == ["pixels_off_8bit 0.0625 exceeds pixels_off_8bit 0.05"]


def test_pixels_off_8bit_is_for_images_only_and_counts_non_finite_values():
    assert output_metrics(np.zeros((2, 3)), np.ones((2, 3))).pixels_off_8bit is None  # 2-D: no image
    reference = np.full((1, 1, 1, 4), 0.5)
    candidate = np.array([0.5, np.nan, np.inf, 0.5]).reshape(1, 1, 1, 4)
    assert output_metrics(reference, candidate).pixels_off_8bit == pytest.approx(0.5)


def test_argmax_agreement_over_the_last_axis_and_the_channel_axis_of_nchw():
    # Rows: [0.1, 0.9] -> 1 vs [0.2, 0.8] -> 1 agree; [0.6, 0.4] -> 0 vs [0.3, 0.7] -> 1 disagree.
    assert argmax_agreement(np.array([[0.1, 0.9], [0.6, 0.4]]), np.array([[0.2, 0.8], [0.3, 0.7]])) == 0.5
    # NCHW, 3 classes over 1x2 pixels: pixel 0 reference class 2, candidate class 2; pixel 1
    # reference class 0, candidate class 1: 1 of 2 agree.
    reference = np.array([[0.0, 5.0], [1.0, 0.0], [2.0, 0.0]]).reshape(1, 3, 1, 2)
    candidate = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]]).reshape(1, 3, 1, 2)
    assert output_metrics(reference, candidate).argmax_agree == 0.5
    # A tie in the reference: picking either tied class agrees.
    assert argmax_agreement(np.array([[1.0, 1.0, 0.0]]), np.array([[0.9, 1.0, 0.0]])) == 1.0
    # No class axis: a one-channel mask, a scalar, a 5-D tensor.
    assert output_metrics(np.zeros((1, 1, 4, 4)), np.zeros((1, 1, 4, 4))).argmax_agree is None
    assert output_metrics(np.array(1.0), np.array(1.0)).argmax_agree is None
    assert argmax_agreement(np.zeros((1, 2, 2, 2, 2)), np.zeros((1, 2, 2, 2, 2))) is None


def test_the_new_bounds_judge_and_rank_like_the_others():
    metrics = OutputMetrics(max_abs=0.01, mean_abs=0.001, max_rel=0.02, abs_p99=0.01, rel_p99=0.02, rel_l2=0.002,
                            cosine=1.0, psnr=50.0, nonfinite=0, pixels_off_8bit=0.08, argmax_agree=0.99)
    passed, reasons = judge(metrics, Tolerance(pixels_off_8bit=0.05, argmax_agree_min=0.999))
    assert not passed
    assert reasons == ["pixels_off_8bit 0.08 exceeds pixels_off_8bit 0.05",
                       "argmax_agree 0.99 is below argmax_agree_min 0.999"]
    # The search ranks by the share of the allowance used: 0.08 / 0.05, and (1 - 0.99) / (1 - 0.999).
    assert bound_ratio("pixels_off_8bit", 0.08, 0.05, True) == pytest.approx(1.6)
    assert bound_ratio("argmax_agree", 0.99, 0.999, False) == pytest.approx(10.0)
    # Not applicable (None) is skipped, as psnr_min on a non-image.
    assert judge(OutputMetrics(**{**metrics.__dict__, "pixels_off_8bit": None, "argmax_agree": None}),
                 Tolerance(pixels_off_8bit=0.0, argmax_agree_min=1.0))[0]


def test_worst_over_iterations_and_reports_written_before_the_new_metrics():
    base = dict(max_abs=0.0, mean_abs=0.0, max_rel=0.0, abs_p99=0.0, rel_p99=0.0, rel_l2=0.0, cosine=1.0,
                psnr=60.0, nonfinite=0)
    worst = worst_metrics([OutputMetrics(**base, pixels_off_8bit=0.01, argmax_agree=0.9),
                           OutputMetrics(**base, pixels_off_8bit=0.03, argmax_agree=1.0)])
    assert worst.pixels_off_8bit == 0.03 and worst.argmax_agree == 0.9
    old = {key: value for key, value in OutputMetrics(**base).to_json().items()
           if key not in ("pixels_off_8bit", "argmax_agree")}
    assert OutputMetrics.from_json(old).pixels_off_8bit is None


def test_per_output_bounds_apply_to_the_named_side_output_only():
    reference = {"alpha": np.full((1, 1, 2, 2), 0.5), "side": np.full((1, 1, 2, 2), 0.5)}
    off = np.array([0.0, 0.0, 0.0, 3.0]).reshape(1, 1, 2, 2) * LEVEL  # 1 of 4 pixels 3 levels off
    candidate = {"alpha": reference["alpha"] + off, "side": reference["side"] + off}
    tolerances = Tolerances.from_mapping({"pixels_off_8bit": 0.05, "psnr_min": 0.0},
                                         {"side": {"pixels_off_8bit": 0.3}})
    verdict = compare_candidate("emulated", [reference], [candidate], ["alpha", "side"], tolerances)
    assert not verdict.outputs["alpha"].passed and verdict.outputs["side"].passed
    assert verdict.reasons == ["alpha: pixels_off_8bit 0.25 exceeds pixels_off_8bit 0.05"]
