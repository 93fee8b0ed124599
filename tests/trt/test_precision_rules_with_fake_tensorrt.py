"""Precision rules checked against the network TensorRT parses, with the test double at the seam."""

from __future__ import annotations

import json

import onnx

from tests.precision.models import data_block, precision_config, prepared
from tests.trt.fake_tensorrt import FakeTensorRTBackend
from trtpipe.stages.precision import PlanPrecision

QUERY = "/encoder/layer.0/attention/self/query/MatMul"
KEY = "/encoder/layer.0/attention/self/key/MatMul"


def plan_with(tmp_path, backend) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = tmp_path / "in.onnx"
    onnx.save(prepared("transformer"), str(source))
    out = tmp_path / "out"
    out.mkdir()
    rules = {"qk": {"match": "regex", "pattern": "/encoder/layer\\.0/attention/self/(query|key)/MatMul"}}
    config = {**precision_config(rules=rules), "data": data_block("transformer")}
    PlanPrecision(backend=backend).run({"model": source}, config, out)
    return json.loads((out / "precision_plan.json").read_text())


def test_rule_nodes_without_a_layer_are_reported_with_fake_tensorrt(tmp_path, caplog):
    # The parser made a layer for the query MatMul (named after it) and one that carries the
    # key MatMul only in its metadata; a third node of the rule would be reported.
    parsed = FakeTensorRTBackend(layers=[(QUERY, None), ("myelin_0", f"[ONNX Layer: {KEY}]")])
    check = plan_with(tmp_path, parsed)["tensorrt_check"]
    assert check == {"checked": True, "rules_without_layers": {}}
    absorbed = FakeTensorRTBackend(layers=[(QUERY, None)])
    check = plan_with(tmp_path / "2", absorbed)["tensorrt_check"]
    assert check["rules_without_layers"] == {"qk": [KEY]}
    assert "produce no TensorRT layer" in caplog.text


def test_without_tensorrt_the_plan_says_it_was_not_checked_with_fake_tensorrt(tmp_path):
    check = plan_with(tmp_path, FakeTensorRTBackend(available=False))["tensorrt_check"]
    assert check["checked"] is False and "not available" in check["reason"]
