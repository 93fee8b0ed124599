"""The precision audit on both inspector schemas: a Myelin ForeignNode that swallowed
an FP32 LayerNorm makes the LayerNorm's realised precision the ForeignNode's."""

from __future__ import annotations

import json

import pytest

from tests.trt.fake_tensorrt import layer, layers_10x, layers_11x, tensor_10x, tensor_11x
from tests.trt.test_inspector_json import LN_NODES, myelin_10x, myelin_11x
from trtpipe.trt.inspect.audit import audit_document, audit_engine, audit_table
from trtpipe.trt.inspect.inspector_json import parse_engine_information


def plan(precisions: dict[str, str]) -> dict:
    return {"format": 1, "default": "fp16", "rules": {}, "totals": {},
            "nodes": [{"name": n, "op_type": n.split("/")[-1].split("_")[0], "precision": p, "reason": "test"}
                      for n, p in precisions.items()]}


LN_FP32 = plan({"/proj/MatMul": "fp16", **{n: "fp32" for n in LN_NODES}, "/out/Cast": "keep"})


@pytest.mark.parametrize("document", [myelin_10x(), myelin_11x()], ids=["10.x", "11.x"])
def test_fp32_layernorm_swallowed_by_an_fp16_foreign_node_is_a_violation(document):
    engine = parse_engine_information(json.dumps(document))
    rows = audit_engine(LN_FP32, engine)
    assert [r.node for r in rows] == LN_NODES  # only the FP32 nodes, in plan order
    pow_row = next(r for r in rows if r.node == "/ln/Pow")
    assert pow_row.realised == "fp16" and pow_row.verdict == "violation" and pow_row.fused
    assert pow_row.engine_layer == "{ForeignNode[/ln/ReduceMean.../ln/Add_1]}"
    document = audit_document(rows, engine)
    assert document["violations"] == LN_NODES and document["totals"] == {"audited": 9, "violation": 9}
    assert document["inspector_schema"] in ("10.x", "11.x")
    assert set(document["rows"][0]) >= {"node", "planned", "realised", "engine_layer", "fused"}


@pytest.mark.parametrize("make_tensor, half, single", [(tensor_10x, "Half", "Float"), (tensor_11x, "Half", "Float")])
def test_a_surviving_node_output_is_the_ground_truth(make_tensor, half, single):
    layers = [layer("{ForeignNode[/ln/ReduceMean.../ln/Add_1]}", "Myelin", [make_tensor("h", half)],
                    [make_tensor("ln_out", single)], LN_NODES)]
    document = layers_10x(layers) if make_tensor is tensor_10x else layers_11x(layers)
    engine = parse_engine_information(json.dumps(document))
    rows = audit_engine(LN_FP32, engine, node_outputs={"/ln/Add_1": ["ln_out"]})
    last = next(r for r in rows if r.node == "/ln/Add_1")
    assert last.realised == "fp32" and last.verdict == "ok" and "ln_out:fp32" in last.evidence
    inner = next(r for r in rows if r.node == "/ln/Pow")  # its own output is gone inside the fusion
    assert inner.realised == "mixed(fp16+fp32)" and inner.verdict == "mixed"


def test_layers_without_metadata_are_found_by_name_and_node_suffix():
    engine = parse_engine_information(json.dumps(layers_10x([
        {"Name": "/norm/Pow", "LayerType": "ElementWise", "Inputs": [tensor_10x("a", "Row major linear FP32")],
         "Outputs": [tensor_10x("b", "Row major linear FP32")]},
        {"Name": "/norm/Pow_7", "LayerType": "ElementWise", "Inputs": [tensor_10x("b", "Row major linear FP32")],
         "Outputs": [tensor_10x("c", "Row major linear FP16 format")]},
    ])))
    rows = audit_engine(plan({"/norm/Pow": "fp32", "/norm/Gone": "fp32"}), engine)
    assert rows[0].engine_layer == "/norm/Pow | /norm/Pow_7"
    assert rows[0].realised == "mixed(fp16+fp32)" and rows[0].verdict == "mixed" and not rows[0].fused
    assert rows[1].verdict == "absent" and rows[1].realised == "absent" and rows[1].engine_layer == ""


def test_an_fp32_layer_is_ok_and_the_table_shows_every_column():
    engine = parse_engine_information(json.dumps(layers_11x([
        layer("/head/MatMul", "gemm", [tensor_11x("x", "Float")], [tensor_11x("y", "Float")], ["/head/MatMul"])])))
    rows = audit_engine(plan({"/head/MatMul": "fp32", "/body/MatMul": "fp16"}), engine)
    assert [(r.node, r.realised, r.verdict, r.fused) for r in rows] == [("/head/MatMul", "fp32", "ok", False)]
    table = audit_table(rows).splitlines()
    assert table[0].split() == ["node", "planned", "realised", "engine", "layer", "fused", "verdict"]
    assert table[2].split() == ["/head/MatMul", "fp32", "fp32", "/head/MatMul", "no", "ok"]
    assert table[-1] == "1 FP32 node(s) audited, 0 violation(s)"
