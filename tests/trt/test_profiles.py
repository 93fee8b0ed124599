"""Optimization profiles, checked against the ONNX graph without TensorRT."""

from __future__ import annotations

import pytest

from tests.trt.tiny import tiny_model
from trtpipe.errors import UserError
from trtpipe.trt.profiles import checked_profiles, dynamic_inputs, opt_shapes, profile_fitting

PROFILE = {"x": {"min": [1, 16, 64], "opt": [4, 16, 64], "max": [8, 16, 64]}}


def test_a_dynamic_model_without_profiles_is_a_user_error_listing_its_inputs():
    model = tiny_model("batch")
    assert dynamic_inputs(model) == {"x": ["batch", 16, 64]}
    with pytest.raises(UserError, match=r"dynamic inputs \(x \[batch, 16, 64\]\).*build.profiles"):
        checked_profiles(model, [])


def test_static_models_need_no_profile_and_profiles_are_returned_as_plain_lists():
    assert checked_profiles(tiny_model(1), []) == []
    assert checked_profiles(tiny_model("batch"), [PROFILE, PROFILE]) == [PROFILE, PROFILE]


@pytest.mark.parametrize("profile, message", [
    ({"y": PROFILE["x"]}, "not inputs of the model"),
    ({"x": {"min": [1, 16, 64], "opt": [4, 16, 64]}}, "exactly the keys min, opt, max"),
    ({"x": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}, "rank 2"),
    ({"x": {"min": [1, 16, 32], "opt": [4, 16, 64], "max": [8, 16, 64]}}, r"min\[2\] is 32.*fixed at 64"),
    ({"x": {"min": [4, 16, 64], "opt": [2, 16, 64], "max": [8, 16, 64]}}, "min 4, opt 2, max 8"),
    ({"x": {"min": "1x16x64", "opt": [4, 16, 64], "max": [8, 16, 64]}}, "not a list of non-negative integers"),
    ({}, r"lacks the dynamic input\(s\) \['x'\]"),
])
def test_wrong_profiles_name_the_full_key(profile, message):
    with pytest.raises(UserError, match=message) as error:
        checked_profiles(tiny_model("batch"), [PROFILE, profile])
    assert "build.profiles[1]" in str(error.value)


def test_validation_shapes_are_the_opt_shapes_and_feeds_pick_the_profile_that_admits_them():
    small = {"x": {"min": [1, 16, 64], "opt": [1, 16, 64], "max": [2, 16, 64]}}
    assert opt_shapes([PROFILE]) == {"x": [4, 16, 64]} and opt_shapes([]) == {}
    assert profile_fitting({"x": (2, 16, 64)}, [small, PROFILE]) == 0
    assert profile_fitting({"x": (6, 16, 64)}, [small, PROFILE]) == 1
    assert profile_fitting({"x": (9, 16, 64)}, [small, PROFILE]) is None
