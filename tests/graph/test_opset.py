"""convert_opset: numerics kept, never downgrades, custom ops untouched, failures are UserErrors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.graph.passes.opset import convert_opset, default_opset


@pytest.mark.parametrize("target", [17, 18])
def test_13_to_target_keeps_numerics(target):
    model = graphs.layernorm_graph(opset=13, shape=(2, 3, 512))
    before = model.SerializeToString()
    converted = convert_opset(model, target)
    assert default_opset(converted) == target
    assert converted.ir_version >= 8
    assert model.SerializeToString() == before
    onnx.checker.check_model(converted, full_check=True)
    x = graphs.random_input((2, 3, 512))
    np.testing.assert_allclose(graphs.run(converted, {"x": x})[0], graphs.run(model, {"x": x})[0], atol=1e-6)


def test_at_or_above_target_is_left_alone():
    model = graphs.layernorm_graph(opset=18)
    assert convert_opset(model, 17) is model


def test_custom_domain_ops_are_left_alone():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MyOp", ["r"], ["y"], name="custom", domain="my.domain", alpha=1.0),
    ]
    model = graphs.make_model(nodes, [graphs.float_input("x", [2])], [graphs.float_input("y", [2])], opset=13)
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    converted = convert_opset(model, 17)
    custom = converted.graph.node[-1]
    assert (custom.domain, custom.op_type, custom.attribute[0].f) == ("my.domain", "MyOp", 1.0)
    assert {(o.domain, o.version) for o in converted.opset_import} == {("", 17), ("my.domain", 1)}


def test_unconvertible_op_is_a_user_error_naming_it():
    nodes = [helper.make_node("FooBar", ["x"], ["y"], name="foo")]
    model = graphs.make_model(nodes, [graphs.float_input("x", [2])], [graphs.float_input("y", [2])], opset=13)
    with pytest.raises(UserError) as caught:
        convert_opset(model, 17)
    message = str(caught.value)
    assert "op FooBar" in message and "upgrade_opset" in message and "\n" not in message
