"""The bytes that are hashed are the bytes that are read (issue 22, item 3).

The source's digest is taken when the run starts; sanitize read the file later. Replacing
the model in between stored model B's graph under model A's key (10 of 12 trials in the
issue's report), and later runs of A got B from the cache. Here the replacement is made
deterministic: the digest function is wrapped so that the files are replaced right after
the real digest of A was taken, exactly where a concurrent `cp` would land."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.external_model import DATA_OVERRIDE, model_weights, weight_bytes, write_model
from trtpipe import api
from trtpipe.runner import pipeline


def replace_whole_model(a: Path, b: Path) -> None:
    """What `cp -r b/. a/` through temporary names does: new files renamed over A's."""
    for name in ("model.onnx", "w.bin"):
        shutil.copyfile(b.parent / name, a.parent / f".{name}.new")
        os.replace(a.parent / f".{name}.new", a.parent / name)


def rewrite_weights_in_place(a: Path, b: Path) -> None:
    """What an exporter writing into the same data file does: same inode, same size, other bytes."""
    with open(a.parent / "w.bin", "r+b") as handle:
        handle.write((b.parent / "w.bin").read_bytes())


def sanitize_entries(cache: Path) -> list[Path]:
    return sorted((cache / "entries" / "sanitize").glob("*/model.onnx"))


@pytest.mark.parametrize("replace", [replace_whole_model, rewrite_weights_in_place])
def test_a_model_replaced_after_its_digest_is_never_cached_under_its_key(tmp_path, monkeypatch, replace):
    a = write_model(tmp_path / "a", data=weight_bytes(1), seed=1)
    b = write_model(tmp_path / "b", data=weight_bytes(2), seed=2)
    cache = tmp_path / "cache"
    real_digest = pipeline.memoised_digest
    swapped = []

    def digest_then_replace(path, index_dir):
        digest = real_digest(path, index_dir)
        if Path(path).resolve() == a.resolve() and not swapped:
            replace(a, b)
            swapped.append(digest)
        return digest

    monkeypatch.setattr(pipeline, "memoised_digest", digest_then_replace)
    overrides = ["stages=[sanitize]", f"model.path={a}", DATA_OVERRIDE, f"cache.dir={cache}"]
    with pytest.raises(api.PipelineFailed) as raised:
        api.run(overrides, run_dir=tmp_path / "run1", start_dir=tmp_path)
    assert swapped
    assert raised.value.result.exit_code == 2, "a user error: the model changed under the run"
    assert "changed while trtpipe was reading it" in str(raised.value)
    assert sanitize_entries(cache) == [], "nothing is cached from a model that changed during the run"
    assert not any((cache / "tmp").iterdir()), "the snapshot is deleted"

    # The model is stable now (it is B's bytes): a run caches B under B's own key, and the
    # result holds B's weights; nothing in the cache ever holds B under A's digest.
    monkeypatch.setattr(pipeline, "memoised_digest", real_digest)
    result = api.run(overrides, run_dir=tmp_path / "run2", start_dir=tmp_path)
    assert result.manifest["source"]["sha256"] != swapped[0]
    [entry] = sanitize_entries(cache)
    assert model_weights(entry) == weight_bytes(2)


def test_a_stable_model_is_read_through_a_snapshot_with_the_same_result(tmp_path):
    a = write_model(tmp_path / "a", data=weight_bytes(1), seed=1)
    result = api.run(["stages=[sanitize]", f"model.path={a}", DATA_OVERRIDE, f"cache.dir={tmp_path / 'cache'}"],
                     run_dir=tmp_path / "run", start_dir=tmp_path)
    assert result.ok
    assert model_weights(result.artifact("sanitize", "model")) == weight_bytes(1)
    assert not any((tmp_path / "cache" / "tmp").iterdir())


def test_a_user_error_about_the_model_names_the_users_file_not_the_snapshot(tmp_path):
    """The snapshot is deleted when the stage ends: an error (and its pasteable fix) must name
    the user's own file."""
    from onnx import TensorProto, helper

    from tests.cli_helpers import run_trtpipe

    missing = "tensor_no_node_produces"
    graph = helper.make_graph([helper.make_node("Add", ["x", missing], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "mine" / "broken.onnx"
    path.parent.mkdir()
    path.write_bytes(model.SerializeToString())
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={path}", "+data.inputs.x={low:0,high:1,dtype:float32}")
    assert run.code == 2, run.stdout + run.stderr
    text = run.stdout + run.stderr
    assert f"check_model('{path}')" in text
    assert str(tmp_path / "cache" / "tmp") not in text


def test_a_data_folder_swapped_for_a_link_after_the_start_is_refused(tmp_path, monkeypatch):
    """The start's checks passed on a real folder; a link to a folder outside (holding the very same
    bytes, so the digest still matches) put in its place afterwards must not be read."""
    (tmp_path / "a" / "sub").mkdir(parents=True)
    a = write_model(tmp_path / "a", location="sub/w.bin", data=weight_bytes(1), seed=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(weight_bytes(1))
    real_digest = pipeline.memoised_digest

    def digest_then_link(path, index_dir):
        digest = real_digest(path, index_dir)
        shutil.rmtree(a.parent / "sub")
        os.symlink(outside, a.parent / "sub")
        return digest

    monkeypatch.setattr(pipeline, "memoised_digest", digest_then_link)
    overrides = ["stages=[sanitize]", f"model.path={a}", DATA_OVERRIDE, f"cache.dir={tmp_path / 'cache'}"]
    with pytest.raises(api.PipelineFailed) as raised:
        api.run(overrides, run_dir=tmp_path / "run", start_dir=tmp_path)
    assert raised.value.result.exit_code == 2
    assert "symbolic link" in str(raised.value) and "'W'" in str(raised.value)
    assert sanitize_entries(tmp_path / "cache") == []


def _npz(path: Path, seed: int) -> Path:
    import numpy as np

    np.savez(path, x=np.random.default_rng(seed).standard_normal((1, 64)).astype(np.float32))
    return path


def test_sample_data_replaced_after_its_digest_is_never_cached_under_its_key(tmp_path, monkeypatch):
    """`data.path`'s digest is in the precision stage's key; the stage read the file later. Data B
    written over A in between would be cached as A's evidence. The file is replaced right after
    the start's checks (the last read of the original before any stage runs)."""
    a = write_model(tmp_path / "m", data=weight_bytes(1), seed=1)
    data = _npz(tmp_path / "samples.npz", 1)
    replacement = _npz(tmp_path / "other.npz", 2)
    real_check = pipeline.check_sample_data
    replaced = []

    def check_then_replace(*args, **kwargs):
        shapes = real_check(*args, **kwargs)
        os.replace(replacement, data)
        replaced.append(True)
        return shapes

    monkeypatch.setattr(pipeline, "check_sample_data", check_then_replace)
    cache = tmp_path / "cache"
    overrides = ["stages=[sanitize,precision]", f"model.path={a}", f"data.path={data}", f"cache.dir={cache}"]
    with pytest.raises(api.PipelineFailed) as raised:
        api.run(overrides, run_dir=tmp_path / "run1", start_dir=tmp_path)
    assert replaced
    assert raised.value.result.exit_code == 2
    assert f"data.path {data} changed while trtpipe was reading it" in str(raised.value)
    assert not (cache / "entries" / "precision").exists() or not any((cache / "entries" / "precision").iterdir())
    assert not any((cache / "tmp").iterdir()), "the snapshot is deleted"

    monkeypatch.setattr(pipeline, "check_sample_data", real_check)
    assert api.run(overrides, run_dir=tmp_path / "run2", start_dir=tmp_path).ok, "stable data runs"
