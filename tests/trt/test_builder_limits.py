"""The builder's measured limit in the build stage's op check (trtpipe/trt/parser/builder_limits.py):
an LSTM/GRU inside an If whose Y output is unread is refused naming the op and its nodes for
build.backend=tensorrt_rtx, where it was measured (exit 2 unless build.unsupported=warn), and is
a warning for TensorRT 10/11; read Y, or the node outside an If, passes. The models
are built here and run through ONNX Runtime (tests/trt/recurrent_models.py); the real
TensorRT-RTX builder's verdict on the same models is tests/test_rtx_oracle.py's."""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from tests.trt.recurrent_models import recurrent_model
from trtpipe.errors import UserError
from trtpipe.graph.names.recurrent_in_if import recurrent_without_y_in_if
from trtpipe.trt.parser.parser_check import check_parser_support


RTX = {"tensorrt_version": None, "unsupported": "error", "backend": "tensorrt_rtx"}


def _runs_in_onnxruntime(model) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((3, 1, 4), np.float32)}
    if any(i.name == "c" for i in session.get_inputs()):
        feeds["c"] = np.array(True)
    session.run(None, feeds)


@pytest.mark.parametrize(("op", "name_y"), [("LSTM", False), ("LSTM", True), ("GRU", False)])
def test_a_recurrent_node_in_an_if_with_y_unread_stops_the_op_check_naming_op_and_nodes(tmp_path, op, name_y):
    model = recurrent_model(op, read_y=False, name_y=name_y)
    _runs_in_onnxruntime(model)
    with pytest.raises(UserError) as caught:
        check_parser_support(model, RTX, None, tmp_path)
    text = str(caught.value)
    assert "\n" not in text
    assert (f"TensorRT-RTX's builder cannot build 1 op(s) of this model: {op} (2 nodes: "
            f"if/else_branch/else_{op.lower()}, if/then_branch/then_{op.lower()})") in text
    assert "Y read by no node" in text and "build.unsupported=warn" in text


@pytest.mark.parametrize(("read_y", "in_if"), [(True, True), (False, False), (True, False)])
def test_y_read_or_the_node_outside_an_if_passes(tmp_path, read_y, in_if):
    model = recurrent_model("LSTM", read_y=read_y, in_if=in_if)
    _runs_in_onnxruntime(model)
    report, _ = check_parser_support(model, RTX, None, tmp_path)
    assert report["errors"] == [] and report["warnings"] == []
    assert recurrent_without_y_in_if(model) == []


def test_warn_continues_and_the_report_marks_the_builder_finding(tmp_path):
    report, fact = check_parser_support(recurrent_model("LSTM"), {**RTX, "unsupported": "warn"}, None, tmp_path)
    written = json.loads((tmp_path / "parser_support.json").read_text())
    assert report["errors"] == written["errors"] == ["LSTM"]
    (finding,) = written["findings"]
    assert finding["stage"] == "builder" and finding["severity"] == "error" and finding["count"] == 2
    assert "LSTM x2" in fact


@pytest.mark.parametrize("version", ["10.16", "11.1"])
def test_for_tensorrt_the_unmeasured_builder_gets_a_warning_not_a_refusal(tmp_path, version):
    """Measured on TensorRT-RTX's builder only: a TensorRT 10/11 user is warned, never refused."""
    report, _ = check_parser_support(recurrent_model("LSTM"), {"tensorrt_version": version, "unsupported": "error"},
                                     None, tmp_path)
    assert report["errors"] == [] and report["warnings"] == ["LSTM"]
    assert f"TensorRT {version}'s builder was not measured" in report["findings"][0]["reason"]


def test_y_read_only_by_a_nested_if_counts_as_read():
    """A read from a subgraph nested in the branch (an outer-scope read) is a read."""
    from onnx import TensorProto, helper

    model = recurrent_model("LSTM", read_y=True)
    branch = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")  # hands out [Y, Y_h]
    inner = helper.make_graph([helper.make_node("Identity", [branch.output[0].name], ["inner_y"])], "inner", [],
                              [helper.make_tensor_value_info("inner_y", TensorProto.FLOAT, None)])
    branch.node.append(helper.make_node("If", ["c"], ["nested_y"], then_branch=inner, else_branch=inner))
    branch.output[0].name = "nested_y"
    assert [w for w, _ in recurrent_without_y_in_if(model)] == []
