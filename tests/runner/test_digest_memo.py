"""Source digests are memoised by stat, and never outlive an edit of the model or its data."""

from __future__ import annotations

import os

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
