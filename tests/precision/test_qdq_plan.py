"""Q/DQ as plan entries (issue 31, item 1; precision/auto/qdq_plan.py): the plan's precision of a Q/DQ is
the type the written node has on its float side, and every Cast next to one has a named reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.cast_reasons import casts_by_reason
from trtpipe.precision.plan.planner import plan_precision


def _requantized(opset: int, scale: float) -> onnx.ModelProto:
    """x -> Mul -> Q -> DQ -> Mul -> y: a Q fed by a computed tensor, a DQ read by a computing node."""
    inits = [numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(scale), "s"),
             numpy_helper.from_array(np.int8(0), "zp"), numpy_helper.from_array(np.float32(3.0), "three")]
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="scale_up"),
             helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["q"], name="Q"),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"], name="DQ"),
             helper.make_node("Mul", ["d", "three"], ["y"], name="scale_again")]
    graph = helper.make_graph(nodes, "requantized", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _plan_and_casts(model: onnx.ModelProto):
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(auto={"max_abs": None}, keep_io_types=False), None)
    written, report = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()},
                                  keep_io_types=False)
    return decisions, written, casts_by_reason(net, decisions, report["casts_added"]["casts"])


def test_at_opset_19_a_q_reads_its_producers_type_and_no_cast_is_needed():
    decisions, written, casts = _plan_and_casts(_requantized(19, 0.02))
    assert {n: decisions[n].precision for n in ("scale_up", "Q", "DQ", "scale_again")} == dict.fromkeys(
        ("scale_up", "Q", "DQ", "scale_again"), "fp16")
    assert "its producer 'scale_up'" in decisions["Q"].reason
    assert casts == {} and not [n for n in written.graph.node if n.op_type == "Cast"]
    scales = [t for t in written.graph.initializer if t.name.startswith("s")]
    assert scales and all(t.data_type == TensorProto.FLOAT16 for t in scales)


@pytest.mark.parametrize("opset, kind", [(17, "opset < 19"), (19, "subnormal scale")])
def test_a_q_and_dq_kept_fp32_charge_their_casts_to_a_named_reason(opset, kind):
    # 1e-5 is below FP16's normal range (2^-14): stored FP16 it would lose precision.
    decisions, written, casts = _plan_and_casts(_requantized(opset, 1e-5 if kind == "subnormal scale" else 0.02))
    assert decisions["Q"].precision == decisions["DQ"].precision == "fp32"
    assert decisions["Q"].reason.startswith(kind) and decisions["DQ"].reason.startswith(kind)
    # One Cast into the Q (from FP16 scale_up), one out of the DQ (into FP16 scale_again).
    assert casts == {kind: 2}
    assert [t.data_type for t in written.graph.initializer if t.name == "s"] == [TensorProto.FLOAT]


@pytest.mark.parametrize("default, expected", [("fp16", "fp16"), ("fp32", "fp32")])
def test_a_q_of_an_fp16_graph_input_reads_it_as_authored_except_under_the_fp32_baseline(default, expected):
    inits = [numpy_helper.from_array(np.float16(0.02), "s"), numpy_helper.from_array(np.int8(0), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="Q"),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="DQ")]
    graph = helper.make_graph(nodes, "fp16_input", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    name_nodes_as_parser_does(model)
    decisions, _ = plan_precision(network_from_model(model), precision_config(default=default, auto={"max_abs": None}),
                                  None)
    assert decisions["Q"].precision == expected
    assert ("graph input" in decisions["Q"].reason) == (default == "fp16")
