"""Where lean plans must not go FP16 (review of issue 16): a fused Instance/GroupNorm whose statistics the
reference run cannot see, an additive mask read by LogSoftmax (-inf stays -inf); and what the plan and the
localisation say about the additive mask they do keep FP16."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.test_lean_plans import _plan
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.validate.localize import localize

CHANNELS = 4


@pytest.mark.parametrize("op", ["InstanceNormalization", "GroupNormalization"])
def test_a_fused_instance_or_group_norm_stays_fp32_without_evidence_of_its_statistics(op):
    """x ~ N(0, 1000): the hidden (x - E[x])^2 reaches ~1e7, beyond FP16, though the output is ~3."""
    weights = [numpy_helper.from_array(np.ones(CHANNELS, np.float32), "scale"),
               numpy_helper.from_array(np.zeros(CHANNELS, np.float32), "bias")]
    attributes = {"num_groups": 2} if op == "GroupNormalization" else {}
    node = helper.make_node(op, ["x", "scale", "bias"], ["y"], name="norm", **attributes)
    shape = [2, CHANNELS, 4, 16]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = [{"x": np.random.default_rng(i).normal(0, 1000, shape).astype(np.float32)} for i in range(2)]
    decisions, _, _ = _plan(model, feeds, max_abs=4096.0, fewest_casts=False)
    assert decisions["norm"].observed_max_abs < 10  # the output fits: only the statistics overflow
    assert decisions["norm"].precision == "fp32"
    assert "not measured" in decisions["norm"].reason


def _masked_scores(reader: str) -> onnx.ModelProto:
    """scores = x @ w; scores + (1 - m) * -1e9; then `reader` (Softmax or LogSoftmax); times m; @ x."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 8)).astype(np.float32), "w"),
               numpy_helper.from_array(np.array(-1e9, np.float32), "big"),
               numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["s"], name="scores"),
             helper.make_node("Sub", ["one", "m"], ["inverted"], name="invert"),
             helper.make_node("Mul", ["inverted", "big"], ["mask"], name="mask_scale"),
             helper.make_node("Add", ["s", "mask"], ["masked"], name="add_mask"),
             helper.make_node(reader, ["masked"], ["p"], name="normalise", axis=-1),
             helper.make_node("Mul", ["p", "m"], ["kept"], name="keep"),
             helper.make_node("MatMul", ["kept", "x"], ["y"], name="mix")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [8, 8]) for n in ("x", "m")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _mask_feed(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = (rng.random((8, 8)) > 0.3).astype(np.float32)
    mask[:, 0] = 1.0
    return {"x": rng.normal(0, 1, (8, 8)).astype(np.float32), "m": mask}


def test_an_additive_mask_read_by_logsoftmax_stays_fp32_because_minus_inf_stays_minus_inf():
    model = _masked_scores("LogSoftmax")
    decisions, mixed, _ = _plan(model, [_mask_feed(0), _mask_feed(1)], max_abs=4096.0, fewest_casts=False)
    assert decisions["add_mask"].precision == "fp32"
    reference = ReferenceRunner(model).run(_mask_feed(9))["y"]
    emulated = EmulatedRunner(mixed).run(_mask_feed(9))["y"]
    assert np.isfinite(reference).all() and np.isfinite(emulated).all()  # -inf * 0 would be NaN


def test_the_fp16_additive_mask_says_why_and_localisation_does_not_blame_its_minus_inf():
    model = _masked_scores("Softmax")
    decisions, mixed, _ = _plan(model, [_mask_feed(0), _mask_feed(1)], max_abs=4096.0)
    add = decisions["add_mask"]
    assert add.precision == "fp16" and add.observed_max_abs > 4096
    assert "additive mask read only by Softmax" in add.reason
    found = localize(model, mixed, _mask_feed(9))
    errors = {t.node: t for t in found.tensors}
    assert errors["add_mask"].cand_saturated > 0 and errors["add_mask"].cand_nonfinite == 0
    assert found.first is None, found.first


def _read_by_three_ifs() -> onnx.ModelProto:
    """relu(x) read by three Ifs' bodies and by an Exp that a rule keeps FP32."""
    def branch(name):
        nodes = [helper.make_node("Mul", ["r", "r"], [f"{name}_a"], name=f"{name}_mul"),
                 helper.make_node("Relu", [f"{name}_a"], [f"{name}_o"], name=f"{name}_relu")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_o", TensorProto.FLOAT, [4])])

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Identity", ["e"], ["y0"], name="copy")]
    nodes += [helper.make_node("If", ["c"], [f"y{i}"], name=f"if{i}", then_branch=branch(f"then{i}"),
                               else_branch=branch(f"else{i}")) for i in (1, 2, 3)]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [4]) for i in range(4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _all_casts(model: onnx.ModelProto) -> int:
    def count(graph):
        return sum(1 if node.op_type == "Cast" else 0 for node in graph.node) + sum(
            count(attribute.g) for node in graph.node for attribute in node.attribute if attribute.g.node)
    return count(model.graph)


def test_fewest_casts_leaves_producers_of_tensors_read_in_bodies_alone():
    from tests.precision.models import precision_config
    from trtpipe.precision.network.decisions import MATERIALIZE_AS
    from trtpipe.precision.materialize.materialize import materialize
    from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
    from trtpipe.precision.plan.planner import plan_precision

    written = {}
    for fewest in (False, True):
        model = _read_by_three_ifs()
        name_nodes_as_parser_does(model)
        config = precision_config(rules={"e": {"match": "exact", "pattern": "exp", "precision": "fp32"}},
                                  auto={"max_abs": None, "island_size": 0, "fewest_casts": fewest})
        decisions, _ = plan_precision(network_from_model(model), config, [], {})
        mixed, _ = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()})
        onnx.checker.check_model(mixed, full_check=True)
        written[fewest] = (_all_casts(mixed), decisions["relu"].precision)
    assert written[True][1] == "fp16"  # moving relu to FP32 would add a Cast in every body
    assert written[True][0] <= written[False][0], written
