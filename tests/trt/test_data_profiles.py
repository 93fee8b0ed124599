"""The profile taken from sample data, and sample data checked against given profiles (trtpipe/trt/data_profiles.py).

The model side is a real ONNX graph (tests/test_cli_dynamic_inputs.small_model); the
command-line paths are in tests/test_cli_dynamic_one_step.py.
"""

from __future__ import annotations

import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.test_cli_dynamic_inputs import small_model
from trtpipe.errors import UserError
from trtpipe.trt.data_profiles import check_data_in_profiles, derived_profile_fact, profile_from_data
from trtpipe.trt.profiles import checked_profiles


def test_samples_of_several_shapes_give_min_max_per_dimension_and_the_first_as_opt():
    model = small_model("batch")
    profiles = checked_profiles(model, [], {"x": [[4, 3, 8, 8], [1, 3, 8, 8], [6, 3, 8, 8]]})
    assert profiles == [{"x": {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [6, 3, 8, 8]}}]
    assert "x min [1,3,8,8] opt [4,3,8,8] max [6,3,8,8]" in derived_profile_fact(profiles[0])


def test_a_sample_shape_the_model_cannot_take_makes_no_profile():
    dims = {"x": [None, 3, 8, 8]}
    assert profile_from_data(dims, {"x": [[2, 4, 8, 8]]}) is None  # a fixed dimension differs
    assert profile_from_data(dims, {"x": [[2, 3, 8]]}) is None  # another rank
    assert profile_from_data(dims, {}) is None


def test_require_profiles_ignores_the_data_and_its_example_is_the_data_shape():
    with pytest.raises(UserError) as caught:
        checked_profiles(small_model(-1), [], {"x": [[5, 3, 8, 8]]}, require=True)
    assert "build.require_profiles=true" in str(caught.value)
    assert "'build.profiles=[{x:{min:[5,3,8,8],opt:[5,3,8,8],max:[5,3,8,8]}}]'" in caught.value.fix


def test_data_fitting_any_of_several_profiles_is_accepted_and_outside_all_is_refused():
    profiles = [{"x": {"min": [1, 3, 8, 8], "opt": [1, 3, 8, 8], "max": [2, 3, 8, 8]}},
                {"x": {"min": [4, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [8, 3, 8, 8]}}]
    check_data_in_profiles(profiles, {"x": [[2, 3, 8, 8], [8, 3, 8, 8]]}, "data.path s.npz")
    with pytest.raises(UserError) as caught:
        check_data_in_profiles(profiles, {"x": [[3, 3, 8, 8]]}, "data.path s.npz")
    assert "dimension 0 is 3, outside build.profiles[0].x's range [1, 2] (and outside the other 1 profile(s))" \
        in str(caught.value)
    # The Fix widens profile 0 and keeps profile 1; Hydra reads it back as exactly those profiles.
    quoted = [word for word in shlex.split(caught.value.fix.split("data, ", 1)[1].split(", or", 1)[0])]
    parsed = OverridesParser.create().parse_overrides(quoted)[0].value()
    assert parsed == [{"x": {"min": [1, 3, 8, 8], "opt": [1, 3, 8, 8], "max": [3, 3, 8, 8]}}, profiles[1]]


def test_malformed_profiles_are_left_to_the_build_stage_to_report():
    check_data_in_profiles([{"x": {"min": "oops"}}], {"x": [[9, 3, 8, 8]]}, "here")
    check_data_in_profiles(["not a mapping"], {"x": [[9, 3, 8, 8]]}, "here")
