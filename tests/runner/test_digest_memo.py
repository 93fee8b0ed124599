"""Source digests are memoised by stat, and never outlive an edit of the model or its data."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.cache.digest_memo import memoised_digest
from trtpipe.cache.hashing import artifact_digest


def external_model(path, weight: float):
    w = numpy_helper.from_array(np.full((64, 64), weight, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)


def test_memo_matches_the_full_digest_and_follows_edits(tmp_path):
    model = tmp_path / "m.onnx"
    external_model(model, 1.0)
    first = memoised_digest(model, tmp_path)
    assert first == artifact_digest(model)
    assert memoised_digest(model, tmp_path) == first  # memo hit
    # Same size, different bytes in the external data file: the digest must change.
    data = tmp_path / "weights.bin"
    stat = data.stat()
    data.write_bytes(np.full((64, 64), 2.0, np.float32).tobytes())
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = memoised_digest(model, tmp_path)
    assert second != first and second == artifact_digest(model)


def test_missing_external_data_is_not_served_from_the_memo(tmp_path):
    model = tmp_path / "m.onnx"
    external_model(model, 1.0)
    memoised_digest(model, tmp_path)
    (tmp_path / "weights.bin").unlink()
    try:
        memoised_digest(model, tmp_path)
    except FileNotFoundError:
        return
    raise AssertionError("a digest was returned for a model whose external data is gone")


# Issue 32, item 4: the memo is served only where it can show the bytes unchanged.

def counted_hashes(monkeypatch) -> list:
    from trtpipe.cache import digest_memo

    calls = []
    real = digest_memo.artifact_digest
    monkeypatch.setattr(digest_memo, "artifact_digest", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def memo_record(index, path):
    from trtpipe.cache.digest_memo import _MEMO_FILE

    return json.loads((index / _MEMO_FILE).read_text())[str(path.resolve())]


def rewrite_keeping_size_and_mtime(path, offset: int):
    """Change one byte at `offset` in place (same inode, same size) and set the mtime back."""
    stat = path.stat()
    time.sleep(0.02)  # past a tick of the file system's clock
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
        stat.st_size, stat.st_mtime_ns, stat.st_ino)


def test_a_settled_unchanged_file_is_served_from_the_memo(tmp_path, monkeypatch):
    from trtpipe.cache import digest_memo

    monkeypatch.setattr(digest_memo, "_SETTLED_NS", 0)
    model = tmp_path / "m.bin"
    model.write_bytes(os.urandom(1 << 20))
    calls = counted_hashes(monkeypatch)
    first = memoised_digest(model, tmp_path)
    assert memoised_digest(model, tmp_path) == first == artifact_digest(model) and len(calls) == 1


def test_a_rewrite_outside_the_sampled_windows_is_caught_by_ctime(tmp_path, monkeypatch):
    from trtpipe.cache import digest_memo

    monkeypatch.setattr(digest_memo, "_SETTLED_NS", 0)
    model = tmp_path / "m.bin"
    model.write_bytes(os.urandom(1 << 20))
    first = memoised_digest(model, tmp_path)
    rewrite_keeping_size_and_mtime(model, 200_000)  # between the head and the middle windows
    assert memoised_digest(model, tmp_path) == artifact_digest(model) != first


def test_a_rewrite_the_stamps_miss_is_caught_by_the_sample(tmp_path, monkeypatch):
    from trtpipe.cache import digest_memo
    from trtpipe.cache.digest_memo import _MEMO_FILE, _stamps

    monkeypatch.setattr(digest_memo, "_SETTLED_NS", 0)
    model = tmp_path / "m.bin"
    model.write_bytes(os.urandom(1 << 20))
    first = memoised_digest(model, tmp_path)
    rewrite_keeping_size_and_mtime(model, (1 << 20) - 10)  # in the tail window
    memo = json.loads((tmp_path / _MEMO_FILE).read_text())
    memo[str(model.resolve())]["stamps"] = _stamps(model.resolve(), [])  # as if ctime had not moved
    (tmp_path / _MEMO_FILE).write_text(json.dumps(memo))
    assert memoised_digest(model, tmp_path) == artifact_digest(model) != first


def test_a_record_taken_while_the_file_was_fresh_is_not_served(tmp_path, monkeypatch):
    model = tmp_path / "m.bin"
    model.write_bytes(os.urandom(1 << 20))
    calls = counted_hashes(monkeypatch)
    memoised_digest(model, tmp_path)
    record = memo_record(tmp_path, model)
    assert record["stamps"][0][2] > record["taken_ns"] - 2_000_000_000  # racy: ctime within 2 s
    memoised_digest(model, tmp_path)
    assert len(calls) == 2  # hashed again, never served
