"""trtexec.txt names the model as the run directory publishes it only for a real cache entry."""

from __future__ import annotations

from pathlib import Path

from trtpipe.cache.cache_dir import claim_cache_dir
from trtpipe.stages.build import published_model_path


def _model_at(root: Path) -> Path:
    model = root / "entries" / "precision" / "0123abcd" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"onnx")
    return model


def test_a_cache_entry_is_named_where_the_run_directory_publishes_it(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    claim_cache_dir(cache)
    assert published_model_path(_model_at(cache), tmp_path / "run" / "build") == "../precision/model.onnx"


def test_a_folder_named_entries_outside_a_cache_is_a_plain_relative_path(tmp_path):
    model = _model_at(tmp_path / "project")
    out = tmp_path / "out"
    assert published_model_path(model, out) == "../project/entries/precision/0123abcd/model.onnx"
    assert (out / published_model_path(model, out)).resolve() == model.resolve()
