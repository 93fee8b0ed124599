"""The underflow check inside If/Loop bodies, and over tensors holding an inf mask (issue 30 item 6).

Before: the check judged main-graph tensors only, so a Log inside a body read a power spectrum flushed to
0 (inf in the emulated candidate), and a tensor holding +-inf among tiny values had an inf norm and was
skipped, so the Pow(-0.25) reading it stayed fp16 (inf where a value flushed)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.precision.test_stored_tensors import emulated, run_stage
from tests.precision.test_underflow import REL_L2, rel_l2, without_underflow_check
from tests.precision.underflow_body_models import audio_front_end_in_body, masked_precision_weights
from trtpipe.precision.auto.underflow import storage_loss

# The control-flow node and its body's prefix in the plan's names (graph/names/scopes.py).
BODIES = {"if": ("branch", "branch/then_branch/"), "loop": ("steps", "steps/body/")}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_a_log_inside_a_body_reads_its_power_spectrum_in_fp32(tmp_path, kind):
    model, feeds = audio_front_end_in_body(kind)
    candidate, plan = run_stage(tmp_path, model, feeds)
    expected, got = emulated(model, candidate, feeds)
    assert np.isfinite(got).all() and rel_l2(got, expected) < REL_L2
    control, prefix = BODIES[kind]
    nodes = {n["name"]: n for n in plan["nodes"]}
    body = [prefix + name for name in ("re_sq", "im_sq", "power", "log")]
    assert {n: nodes[n]["precision"] for n in ["stft", *body]} == dict.fromkeys(["stft", *body], "fp32")
    assert "flush to 0 in fp16" in nodes[prefix + "log"]["reason"]
    assert f"change what {prefix}log computes" in nodes["stft"]["reason"]  # reached back across the body's edge
    assert plan["boundaries"]["verified"] and not plan["boundaries"]["not_moved"]
    assert plan["totals"]["low_precision_flop_share"] >= 0.9  # the head stays FP16
    _, naive = emulated(model, without_underflow_check(model, plan), feeds)
    assert not np.isfinite(naive).all()


def test_an_inf_mask_does_not_hide_tiny_values(tmp_path):
    model, feeds = masked_precision_weights()
    candidate, plan = run_stage(tmp_path, model, feeds)
    expected, got = emulated(model, candidate, feeds)
    assert np.isfinite(got).all() and rel_l2(got, expected) < REL_L2
    weights = next(n for n in plan["nodes"] if n["name"] == "weights")
    assert weights["precision"] == "fp32" and "flush to 0 in fp16" in weights["reason"]
    assert "masked_var" in weights["reason"]
    assert plan["totals"]["low_precision_flop_share"] >= 0.9


def test_storage_loss_is_measured_over_finite_values():
    tiny = np.full(1000, 1e-8, np.float32)
    for mask in (-np.inf, np.inf):
        values = np.concatenate([tiny, np.full(10, mask, np.float32)])
        loss = storage_loss(values, None)
        assert loss is not None and loss.flushed == 1000 and loss.storage_error == pytest.approx(1.0)
        assert storage_loss(values, "log").element_error == np.inf
    assert storage_loss(np.array([np.inf, -np.inf], np.float32), None) is None
