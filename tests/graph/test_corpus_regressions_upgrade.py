"""upgrade_opset defects the corpus run (bench/corpus/corpus.py) found, each pinned by a small graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.graph.passes.opset import convert_opset
from trtpipe.graph.upgrade import upgrade_model


def test_a_model_without_a_default_domain_opset_is_left_alone(tmp_path):
    # Corpus: test_adagrad, test_ai_onnx_ml_*: "cannot convert an op of the model from opset 0 to 17".
    node = helper.make_node("LabelEncoder", ["x"], ["y"], name="encode", domain="ai.onnx.ml",
                            keys_int64s=[1, 2], values_int64s=[10, 20])
    graph = helper.make_graph([node], "ml", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 4)], ir_version=10)
    assert convert_opset(model, 17) is model
    onnx.save(model, str(tmp_path / "in.onnx"))
    report = upgrade_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert (report["opset_before"], report["opset_after"], report["converted"]) == (0, 0, False)
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")), full_check=True)


def _scan8_sum() -> onnx.ModelProto:
    """Scan-8 (with its batch axis) summing the rows of x: the corpus' test_scan_sum."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "body",
        [graphs.float_input("sum_in", [2]), graphs.float_input("next", [2])],
        [graphs.float_input("sum_out", [2]), graphs.float_input("scan_out", [2])],
    )
    scan = helper.make_node("Scan", ["", "initial", "x"], ["y", "z"], name="scan", num_scan_inputs=1, body=body)
    return graphs.make_model([scan], [graphs.float_input("initial", [1, 2]), graphs.float_input("x", [1, 3, 2])],
                             [graphs.float_input("y", [1, 2]), graphs.float_input("z", [1, 3, 2])], opset=8, ir_version=3)


def test_a_conversion_that_changes_the_model_inputs_is_refused():
    # Corpus: test_scan_sum: the Scan 8 -> 9 adapter dropped the batch axis from the graph
    # inputs, so ONNX Runtime refused the original's inputs ("Invalid rank for input: x").
    model = _scan8_sum()
    feeds = {"initial": np.zeros((1, 2), np.float32), "x": graphs.random_input((1, 3, 2))}
    graphs.run(model, feeds)  # the original runs
    with pytest.raises(UserError, match=r"changes graph input/output 'initial' \(shape \[1, 2\] -> \[2\], at Scan\)"):
        convert_opset(model, 17)
