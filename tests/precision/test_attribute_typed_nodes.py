"""Nodes whose float output type is set by an attribute (ConstantOfShape's `value`, EyeLike's and the
random generators' `dtype`): the materialiser keeps that type (node_types.py: a type variable bound
only to outputs), so the plan must say `keep`, not the default's fp16.

Found by the TensorRT-RTX oracle (issue 23, `python -m bench.rtx_check`, bench/rtx/RTX.md): on the
wild corpus's nudenet_320n the plan called three ConstantOfShape nodes fp16 while the real parser
logged their outputs FLOAT (trtpipe wrote them FP32 and a Cast to FP16 after each)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision


def filled_model():
    """y = x * ConstantOfShape(shape(x), 1.0) + EyeLike(dtype=float) + (EyeLike(dtype) - EyeLike(no dtype))."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="fill", value=one),
        helper.make_node("Mul", ["x", "ones"], ["m"], name="mul"),
        helper.make_node("EyeLike", ["m"], ["eye"], name="eye", dtype=TensorProto.FLOAT),
        helper.make_node("EyeLike", ["m"], ["eye_as_input"], name="eye_as_input"),  # no dtype: follows m
        helper.make_node("Sub", ["eye", "eye_as_input"], ["zero"], name="sub"),
        helper.make_node("Add", ["m", "zero"], ["m0"], name="add0"),
        helper.make_node("Add", ["m0", "eye"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_attribute_typed_node_is_planned_keep_and_written_as_planned():
    model = filled_model()
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(auto={"max_abs": None}), None)
    assert (decisions["fill"].precision, decisions["fill"].source) == ("keep", "structure")
    assert decisions["fill"].reason.startswith("ConstantOfShape: its output type is set by an attribute")
    assert decisions["eye"].precision == "keep"
    assert decisions["eye_as_input"].precision == "fp16"  # without `dtype` its type follows its input
    assert decisions["mul"].precision == decisions["add"].precision == "fp16"
    mixed, _ = materialize(model, {n: {"none": "keep"}.get(d.precision, d.precision) for n, d in decisions.items()})
    typed = onnx.shape_inference.infer_shapes(mixed)
    types = {v.name: v.type.tensor_type.elem_type for v in typed.graph.value_info}
    assert types["ones"] == TensorProto.FLOAT  # what the plan now says: kept as authored
    assert types["m"] == TensorProto.FLOAT16
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    import onnxruntime as ort
    out = ort.InferenceSession(mixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, x + np.eye(4, dtype=np.float32), rtol=1e-3)
