"""Localisation names the origin, not an amplifier (issue 21, item 4).

The model: two FP16 branches `a = x @ w_a + 1100` (FP16's spacing at 1100 is 1: rounding up to
0.5) and `b = x @ w_b + 100` (spacing 1/16: up to 0.03), then FP32 `difference = a - b` (~1000,
its error 0.05% of that: below the 1% threshold) and FP32 `cancel = difference - 1000` (a few units:
the same absolute error is ~10% of them), then `scale` halves it. `cancel` is the first node above the threshold, but it
computes in FP32: the error is `shift_a`'s rounding, which it amplifies by cancellation.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.validate.naive_fp16 import fp16_except, naive_fp16
from trtpipe.validate.localize import localize
from trtpipe.validate.upstream_origins import describe, trace_upstream, upstream_candidates

FP32 = TensorProto.FLOAT


def amplifier_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w_a"], ["u"], name="project_a"),
        helper.make_node("Add", ["u", "offset_a"], ["a"], name="shift_a"),
        helper.make_node("MatMul", ["x", "w_b"], ["v"], name="project_b"),
        helper.make_node("Add", ["v", "offset_b"], ["b"], name="shift_b"),
        helper.make_node("Sub", ["a", "b"], ["difference"], name="difference"),
        helper.make_node("Sub", ["difference", "thousand"], ["cancelled"], name="cancel"),
        helper.make_node("Mul", ["cancelled", "half"], ["y"], name="scale"),
    ]
    constants = [numpy_helper.from_array(rng.normal(0, 0.3, (64, 16)).astype(np.float32), "w_a"),
                 numpy_helper.from_array(rng.normal(0, 0.3, (64, 16)).astype(np.float32), "w_b"),
                 numpy_helper.from_array(np.array(1100.0, np.float32), "offset_a"),
                 numpy_helper.from_array(np.array(100.0, np.float32), "offset_b"),
                 numpy_helper.from_array(np.array(1000.0, np.float32), "thousand"),
                 numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    graph = helper.make_graph(nodes, "amplifier", [helper.make_tensor_value_info("x", FP32, [4, 64])],
                              [helper.make_tensor_value_info("y", FP32, [4, 16])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds() -> dict:
    return {"x": np.random.default_rng(0).uniform(-1, 1, (4, 64)).astype(np.float32)}


def test_an_fp32_first_node_names_the_fp16_node_whose_rounding_it_amplifies():
    model = amplifier_model()
    found = localize(model, fp16_except(model, lambda node: node.op_type == "Sub"), _feeds())
    first = found.first_above_threshold
    assert first["node"] == "cancel" and first["precision"] == "fp32"
    errors = {t.node: t for t in found.tensors}
    assert not errors["difference"].failed and not errors["shift_a"].failed  # below 1% where they are made
    amplifies = first["amplifies"]
    assert "amplifies error arriving from upstream" in amplifies["note"]
    ranked = [(row["node"], row["precision"]) for row in amplifies["upstream"]]
    assert ranked == [("shift_a", "fp16"), ("shift_b", "fp16")]  # nearest FP16 nodes, through FP32 `difference`
    top, second = amplifies["upstream"]
    assert top["contribution"] > 0.01 > second["contribution"] and top["contribution"] > 5 * second["contribution"]
    assert 0.8 < top["share"] < 1.2 and 0.8 < amplifies["explained"] < 1.2  # its rounding is the error
    assert "nearest origin by measured contribution: shift_a (Add, fp16)" in first["reason"]
    json.dumps(found.to_json(), allow_nan=False)


def test_a_low_precision_first_node_and_a_cast_carrying_error_get_no_amplifier_entry():
    model = amplifier_model()
    found = localize(model, naive_fp16(model), _feeds())
    first = found.first_above_threshold
    assert (first["node"], first["precision"]) == ("cancel", "fp16") and "amplifies" not in first
    # The FP32 Cast writing the graph output only converts its FP16 input: it carries the error.
    cast = next(t for t in found.tensors if t.op_type == "Cast" and t.failed)
    assert cast.precision == "fp32"
    finding = {"node": cast.node, "op_type": "Cast", "tensor": cast.tensor, "precision": "fp32"}
    assert trace_upstream(finding, model, naive_fp16(model), _feeds(), {cast.tensor: np.ones(1)}, {}) is None


def test_the_walk_goes_through_casts_and_fp32_nodes_to_the_nearest_low_precision_producers():
    model = amplifier_model()
    candidate = fp16_except(model, lambda node: node.op_type == "Sub")
    precisions = {"a": "fp16", "b": "fp16", "u": "fp16", "v": "fp16", "difference": "fp32", "cancelled": "fp32"}
    assert any(node.op_type == "Cast" for node in candidate.graph.node)  # the FP16 -> FP32 border
    found = upstream_candidates(candidate, "cancelled", precisions)
    assert [(node.name, tensor, level) for node, tensor, level in found] == [("shift_a", "a", 1), ("shift_b", "b", 1)]
    found = upstream_candidates(candidate, "cancelled", precisions, levels=2)
    assert [(node.name, level) for node, _, level in found] == [("shift_a", 1), ("shift_b", 1), ("project_a", 2),
                                                                 ("project_b", 2)]


@pytest.mark.parametrize("plot", ["true", "false"])  # localisation reuses the validation run, or runs its own
def test_the_console_and_validation_json_name_the_upstream_origin(tmp_path, plot):
    path = tmp_path / "amplifier.onnx"
    onnx.save(amplifier_model(), str(path))
    run = run_trtpipe(tmp_path, "+recipe=naive_fp16", f"model.path={path}", "+data.inputs.x={low:-1,high:1}",
                      "+precision.rules.keep_sub={match:op_type,pattern:Sub}", f"validate.plot={plot}")
    assert run.code == 1, run.stderr
    report = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    first = report["localization"]["first_above_threshold"]
    assert (first["node"], first["precision"]) == ("cancel", "fp32")
    assert first["amplifies"]["upstream"][0]["node"] == "shift_a"
    lines = run.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if "first node above the error threshold" in line)
    assert "cancel (Sub, fp32)" in lines[index]
    assert "amplifies error arriving from upstream" in lines[index + 1]
    assert "origins by measured contribution: shift_a (Add, fp16)" in lines[index + 1]
    assert "first node above the threshold: cancel (Sub, fp32) amplifying shift_a (Add, fp16)" in run.stderr


def test_error_from_further_upstream_is_found_one_level_up():
    # a = x @ w + 1100 (FP16: rounding up to 0.5), d = a - 1000 (FP16, ~100: its own rounding up to 0.03, but it
    # carries a's 0.5), then FP32 d - 100 cancels. The nearest FP16 node is d; its rounding explains little.
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["u"], name="project"),
             helper.make_node("Add", ["u", "offset"], ["a"], name="shift"),
             helper.make_node("Sub", ["a", "thousand"], ["d"], name="lower"),
             helper.make_node("Sub", ["d", "hundred"], ["c"], name="cancel"),
             helper.make_node("Mul", ["c", "half"], ["y"], name="scale")]
    constants = [numpy_helper.from_array(rng.normal(0, 0.3, (64, 16)).astype(np.float32), "w")] + [
        numpy_helper.from_array(np.array(value, np.float32), name)
        for name, value in [("offset", 1100.0), ("thousand", 1000.0), ("hundred", 100.0), ("half", 0.5)]]
    graph = helper.make_graph(nodes, "further", [helper.make_tensor_value_info("x", FP32, [4, 64])],
                              [helper.make_tensor_value_info("y", FP32, [4, 16])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    found = localize(model, fp16_except(model, lambda node: node.name == "cancel"), _feeds())
    first = found.first_above_threshold
    assert first["node"] == "cancel" and first["precision"] == "fp32"
    amplifies = first["amplifies"]
    assert amplifies["explained"] < 0.3, amplifies  # the nearest node's own rounding explains little
    # so the level above is measured too, and a's rounding ranks first
    ranked = [(row["node"], row["level"]) for row in amplifies["upstream"]]
    assert ranked == [("shift", 2), ("lower", 1)], ranked
    assert 0.8 < amplifies["explained_further"] < 1.2
    assert "shift (Add, fp16, further up)" in describe(amplifies)
    assert "nearest origin by measured contribution: shift (Add, fp16)" in first["reason"]
