"""Publishing a cache entry into the run directory must keep external data readable."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.cache.files import copy_file


def test_external_data_stays_readable_after_publishing(tmp_path):
    # onnx refuses an external-data file with more than one hard link (onnx 1.23's
    # bounds check), so a hard-linked run-directory copy would break the cache entry.
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    entry, run = tmp_path / "entry", tmp_path / "run"
    entry.mkdir()
    written = save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                         entry / "model.onnx", external_threshold_bytes=0)
    assert len(written) == 2  # the model and its .data file
    for path in written:
        copy_file(path, run / path.name)
    for model in (entry / "model.onnx", run / "model.onnx"):
        assert load_model(model).graph.initializer[0].dims == [64, 64]
