"""A bound set for the search alone keeps validate's other bounds (config/search_inherit.py).

Before: `++precision.search.tolerance.rel_l2=0.05` replaced the interpolation
`${validate.tolerance}` by `{rel_l2: 0.05}`, and the search judged every other
bound by the built-in value instead of validate's (the recipe's cosine_min 0.9999).
"""

from __future__ import annotations

import pytest
from omegaconf import open_dict

import trtpipe.api as api
from trtpipe.config.search_inherit import inherit_search_tolerances


def test_a_partial_search_tolerance_inherits_the_rest_from_validate():
    cfg = api.compose(["+recipe=transformer_fp16", "++precision.search.tolerance.rel_l2=0.05",
                       "++precision.search.tolerance.psnr_min=null"])
    filled = inherit_search_tolerances(cfg)
    tolerance = dict(cfg.precision.search.tolerance)
    assert tolerance["rel_l2"] == 0.05  # the user's bound wins
    assert tolerance["psnr_min"] is None  # set by the user (null: the built-in bound, as in validate)
    assert tolerance["cosine_min"] == cfg.validate.tolerance.cosine_min == 0.9999  # inherited
    assert set(tolerance) == set(cfg.validate.tolerance)
    assert "precision.search.tolerance.cosine_min" in filled and "precision.search.tolerance.rel_l2" not in filled


def test_the_default_interpolation_is_left_alone():
    cfg = api.compose(["+recipe=transformer_fp16"])
    assert inherit_search_tolerances(cfg) == []
    assert dict(cfg.precision.search.tolerance) == dict(cfg.validate.tolerance)


@pytest.mark.parametrize("name", ["logits", "y/fp16", "output:0"])
def test_search_outputs_inherit_whole_outputs_and_missing_keys(name):
    # Names an override cannot spell (y/fp16) are set on the composed config directly.
    cfg = api.compose([])
    with open_dict(cfg):
        cfg.validate.outputs = {name: {"rel_l2": 0.2, "cosine_min": 0.99}, "other": {"rel_l2": 0.3}}
        cfg.precision.search.outputs = {name: {"rel_l2": 0.1}}
    inherit_search_tolerances(cfg)
    outputs = cfg.precision.search.outputs
    assert dict(outputs[name]) == {"rel_l2": 0.1, "cosine_min": 0.99}
    assert dict(outputs["other"]) == {"rel_l2": 0.3}


def test_the_manifest_records_the_bounds_the_search_used(tmp_path):
    result = api.run(["stages=[sanitize]", f"cache.dir={tmp_path / 'cache'}",
                      "++precision.search.tolerance.rel_l2=0.05"], run_dir=tmp_path / "run", start_dir=tmp_path)
    recorded = result.manifest["config"]["precision"]["search"]["tolerance"]
    assert recorded["rel_l2"] == 0.05
    assert recorded["cosine_min"] == result.manifest["config"]["validate"]["tolerance"]["cosine_min"]
