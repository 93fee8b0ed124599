"""`RunResult.artifact(stage)` finds a model the run left in the cache (issue 33, item 1's
`run.artifacts=final` and failed runs place no model there; the manifest's `left_in_cache`)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

import trtpipe.api as api
from trtpipe.cache.hashing import artifact_digest


def _remove(path) -> None:
    def writable_then_retry(function, name, _error):
        os.chmod(os.path.dirname(name), stat.S_IRWXU)
        os.chmod(name, stat.S_IRWXU)
        function(name)
    shutil.rmtree(path, onerror=writable_then_retry)


def test_a_model_left_in_the_cache_is_found_there_and_a_pruned_one_is_named(tmp_path):
    cache = tmp_path / "cache"
    result = api.run(["model.builtin=transformer", "stages=[sanitize,upgrade_opset,precision]",
                      "run.artifacts=final", f"cache.dir={cache}"], run_dir=tmp_path / "run", start_dir=tmp_path)
    assert result.ok and result.manifest["left_in_cache"] == ["sanitize/model.onnx", "upgrade_opset/model.onnx"]
    sanitized = result.artifact("sanitize")
    recorded = result.manifest["stages"][0]["outputs"]["model"]["sha256"]
    assert cache in sanitized.parents and artifact_digest(sanitized) == recorded
    assert result.artifact("precision") == tmp_path / "run" / "precision" / "model.onnx"  # placed: the run's own
    with pytest.raises(KeyError):
        result.artifact("validate")
    _remove(cache / "entries" / "sanitize")
    with pytest.raises(FileNotFoundError, match="neither in .* nor in the cache any more"):
        result.artifact("sanitize")
