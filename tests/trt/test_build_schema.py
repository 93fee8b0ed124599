"""The `build.*` schema: the proposed conf/build/default.yaml composes onto it, profiles and pool
limits can be given whole from the command line, and their values are checked with the full key."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from trtpipe.config.build_schema import BuildConfig, memory_pool_bytes
from trtpipe.errors import UserError

PROPOSED_DEFAULT_YAML = """
defaults:
  - schema
on_missing: defer
audit: warn
precision_mode: strongly_typed
profiles: []
builder_optimization_level: null
memory_pool_limits: {}
tf32: false
plugins: []
timing_cache: true
"""


def test_the_proposed_default_yaml_is_the_schema_default():
    values = {k: v for k, v in yaml.safe_load(PROPOSED_DEFAULT_YAML).items() if k != "defaults"}
    merged = OmegaConf.merge(OmegaConf.structured(BuildConfig), values)
    assert OmegaConf.to_container(merged) == OmegaConf.to_container(OmegaConf.structured(BuildConfig))


def test_whole_profiles_and_pool_limits_come_from_the_command_line():
    cfg = OmegaConf.merge(OmegaConf.structured(BuildConfig), OmegaConf.from_dotlist([
        "profiles=[{x:{min:[1,8],opt:[4,8],max:[8,8]}}]", "memory_pool_limits.workspace=4G", "tf32=true"]))
    assert OmegaConf.to_container(cfg.profiles) == [{"x": {"min": [1, 8], "opt": [4, 8], "max": [8, 8]}}]
    assert memory_pool_bytes(cfg.memory_pool_limits) == {"workspace": 4 * 2**30}


def test_a_wrong_type_fails_at_compose_time():
    with pytest.raises(ValidationError):
        OmegaConf.merge(OmegaConf.structured(BuildConfig), {"tf32": "sometimes"})


@pytest.mark.parametrize("value, size", [(256, 256 * 2**20), ("512M", 512 * 2**20), ("1.5G", 3 * 2**29),
                                         ("64K", 2**16), ("4096B", 4096), ("2GiB", 2 * 2**30)])
def test_pool_limits_are_mib_or_sized_strings(value, size):
    assert memory_pool_bytes({"workspace": value}) == {"workspace": size}


@pytest.mark.parametrize("limits, message", [({"workspace": -1}, "memory_pool_limits.workspace"),
                                             ({"workspace": "lots"}, "memory_pool_limits.workspace"),
                                             ({"vram": 1}, "pool 'vram'")])
def test_wrong_pool_limits_name_the_key(limits, message):
    with pytest.raises(UserError, match=message):
        memory_pool_bytes(limits)
