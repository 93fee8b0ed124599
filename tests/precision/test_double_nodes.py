"""FP64 nodes: the materialiser does not retype DOUBLE, so the plan must not claim it does."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision


def double_then_float_model():
    weight = numpy_helper.from_array(np.ones((4, 4)), "w")  # float64
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y64"], name="double_matmul"),
        helper.make_node("Cast", ["y64"], ["y32"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["y32"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_double_node_is_kept_and_reported_as_kept():
    model = double_then_float_model()
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(auto={"max_abs": None}), None)
    assert decisions["double_matmul"].precision == "keep"
    assert decisions["double_matmul"].source == "structure"
    assert decisions["relu"].precision == "fp16"
    mixed, report = materialize(model, {n: {"keep": "keep"}.get(d.precision, d.precision) for n, d in decisions.items()})
    matmul = next(node for node in mixed.graph.node if node.name == "double_matmul")
    assert matmul.input[1] == "w" and next(t for t in mixed.graph.initializer if t.name == "w").data_type == TensorProto.DOUBLE
