"""The artifact cache: pinned key format, atomic publish, corruption, concurrency."""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from pathlib import Path

import pytest

from trtpipe.cache.cache import ArtifactCache, cache_key

MATERIAL = {
    "stage": "sanitize",
    "version": "1",
    "config": {"fold_constants": True, "target": 17},
    "inputs": {"model": "0" * 64},
    "tools": {"onnx": "1.16.0"},
}


def write_model(text: str):
    def compute(out_dir: Path) -> dict:
        (out_dir / "model.bin").write_text(text)
        return {"outputs": {"model": "model.bin"}, "summary": f"wrote {text}"}

    return compute


def test_golden_key_is_pinned():
    # A change of the hashing format (canonical JSON, sha256) must be deliberate:
    # it invalidates every cache in the field. Update this value only on purpose.
    from trtpipe.cache.hashing import canonical_json

    expected_bytes = (
        '{"config":{"fold_constants":true,"target":17},"inputs":{"model":"' + "0" * 64 + '"},'
        '"stage":"sanitize","tools":{"onnx":"1.16.0"},"version":"1"}'
    ).encode()
    assert canonical_json(MATERIAL) == expected_bytes
    assert cache_key(MATERIAL) == "d1f37aee3847936164c655b92ae0ddc6f8e60506a72e1edc747cb5e43963b6ea"


def test_key_ignores_dict_order_but_not_values():
    reordered = dict(reversed(list(MATERIAL.items())))
    assert cache_key(reordered) == cache_key(MATERIAL)
    changed = {**MATERIAL, "config": {"fold_constants": False, "target": 17}}
    assert cache_key(changed) != cache_key(MATERIAL)


def test_second_lookup_is_a_hit_with_same_files(tmp_path):
    cache = ArtifactCache(tmp_path)
    first = cache.get_or_compute("sanitize", MATERIAL, write_model("a"))
    second = cache.get_or_compute("sanitize", MATERIAL, write_model("never called"))
    assert (first.status, second.status) == ("ran", "cached")
    assert second.entry.output_path("model").read_text() == "a"
    assert second.entry.output_digest("model") == first.entry.output_digest("model")


def test_failed_compute_publishes_nothing_and_cleans_tmp(tmp_path):
    cache = ArtifactCache(tmp_path)

    def half_written(out_dir: Path) -> dict:
        (out_dir / "model.bin").write_text("partial")
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("sanitize", MATERIAL, half_written)
    assert not (tmp_path / "entries" / "sanitize" / cache_key(MATERIAL)).exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_corrupted_entry_is_discarded_and_rebuilt_with_warning(tmp_path, caplog):
    cache = ArtifactCache(tmp_path)
    entry = cache.get_or_compute("sanitize", MATERIAL, write_model("good")).entry
    entry.output_path("model").write_text("bit rot")
    with caplog.at_level(logging.WARNING):
        again = cache.get_or_compute("sanitize", MATERIAL, write_model("good"))
    assert again.status == "ran"
    assert "does not match its recorded sha256" in again.reason
    assert "invalid" in caplog.text and "rebuilding" in caplog.text
    assert again.entry.output_path("model").read_text() == "good"


def test_entry_with_broken_record_is_rebuilt(tmp_path):
    cache = ArtifactCache(tmp_path)
    entry = cache.get_or_compute("sanitize", MATERIAL, write_model("good")).entry
    (entry.directory / "entry.json").write_text("{not json")
    assert cache.get_or_compute("sanitize", MATERIAL, write_model("good")).status == "ran"


def test_miss_reason_names_the_changed_config_key(tmp_path):
    cache = ArtifactCache(tmp_path)
    first = cache.get_or_compute("sanitize", MATERIAL, write_model("a"))
    assert first.reason == "no earlier entry of this stage in the cache"
    changed = {**MATERIAL, "config": {"fold_constants": False, "target": 17}}
    second = cache.get_or_compute("sanitize", changed, write_model("b"))
    assert second.reason == "config.fold_constants changed true -> false"


def test_temporary_of_a_dead_writer_is_removed_and_a_live_one_kept(tmp_path):
    """Liveness is the writer's flock on its temporary's marker (cache_dir.py), not its PID."""
    from trtpipe.cache.cache_dir import Temporary

    ArtifactCache(tmp_path)
    live = Temporary(tmp_path / "tmp")
    (live.path / "model.bin").write_text("half")
    dead = tmp_path / "tmp" / "dead-writer"
    (dead / "entry").mkdir(parents=True)
    (dead / "TRTPIPE_TMP").write_text("")  # marked, and nobody holds its lock
    ArtifactCache(tmp_path)
    assert not dead.exists()
    assert (live.path / "model.bin").read_text() == "half"
    live.close()
    assert not live.container.exists()


def _compute_in_process(root: str, counter: str) -> str:
    def slow(out_dir: Path) -> dict:
        with open(counter, "a") as handle:
            handle.write("computed\n")
        time.sleep(1.0)
        (out_dir / "model.bin").write_text("shared")
        return {"outputs": {"model": "model.bin"}}

    result = ArtifactCache(Path(root)).get_or_compute("sanitize", MATERIAL, slow)
    return json.dumps([result.status, result.entry.output_digest("model")])


def test_two_concurrent_processes_compute_once(tmp_path):
    counter = tmp_path / "counter.txt"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(_compute_in_process, [(str(tmp_path / "cache"), str(counter))] * 2)
    statuses = sorted(json.loads(r)[0] for r in results)
    digests = {json.loads(r)[1] for r in results}
    assert counter.read_text().count("computed") == 1
    assert statuses == ["cached", "ran"]
    assert len(digests) == 1


def test_unwritable_cache_dir_is_a_user_error(tmp_path):
    from trtpipe.errors import UserError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UserError, match="not writable"):
        ArtifactCache(blocker / "cache")
