"""The timing cache file is keyed by GPU, compute capability, driver, CUDA and TensorRT."""

from __future__ import annotations

import json

import pytest

from tests.trt.fake_tensorrt import FAKE_ENVIRONMENT
from trtpipe.trt.timing_cache import cache_dir_from, timing_cache_file, timing_cache_key, timing_cache_name

FACTS = FAKE_ENVIRONMENT.key_facts()


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_every_fact_changes_the_key(fact):
    assert timing_cache_key({**FACTS, fact: "other"}) != timing_cache_key(FACTS)


def test_the_key_is_pinned_and_the_name_readable():
    # Changing the key format is a deliberate act: it orphans every shared timing cache.
    assert timing_cache_key(FACTS) == timing_cache_key(dict(reversed(list(FACTS.items()))))
    assert len(timing_cache_key(FACTS)) == 16
    assert timing_cache_name(FACTS) == f"fake-gpu-test-double-sm86-trt10.9.0.34-{timing_cache_key(FACTS)}.cache"


def test_the_file_lives_in_trtpipes_cache_dir_with_a_sidecar_naming_its_facts(tmp_path):
    cache = timing_cache_file(tmp_path, FACTS)
    assert cache.path.parent == tmp_path / "timing_cache" and not cache.path.exists()
    sidecar = json.loads(cache.path.with_suffix(".json").read_text())
    assert sidecar == {"key": cache.key, "facts": FACTS}
    assert timing_cache_file(tmp_path, FACTS) == cache


def test_cache_dir_comes_from_the_runner_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPIPE_CACHE", str(tmp_path / "env"))
    assert cache_dir_from({"cache_dir": str(tmp_path / "given")}) == tmp_path / "given"
    assert cache_dir_from({}) == tmp_path / "env"
