"""Real ONNX graphs TensorRT's ONNX parser cannot (all) import, as exporters write them.

Each runs in ONNX Runtime (the tests check that), so they are models a user can have:
- `dynamic_quantized_model`: what onnxruntime.quantization.quantize_dynamic makes of a
  MatMul: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the two scales.
- `conv_integer_model`: a uint8 image through ConvInteger (an integer-quantized Conv).
- `contrib_ops_model`: ONNX Runtime contrib ops (com.microsoft FusedMatMul, Gelu).
- `if_model`: an `If` whose then-branch holds an op TensorRT lacks (Det).
- `local_function_model`: a model-local function, which the parser expands.
- `loop_model`: a Loop whose body holds Det.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(graph: onnx.GraphProto, extra_opsets=(), functions=()) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), *extra_opsets],
                              functions=list(functions))
    model.ir_version = 8
    return model


def dynamic_quantized_model() -> onnx.ModelProto:
    rng = np.random.RandomState(0)
    weight = rng.randint(0, 256, size=(8, 4)).astype(np.uint8)
    inits = [numpy_helper.from_array(weight, "w_q"), numpy_helper.from_array(np.array(128, np.uint8), "w_zero"),
             numpy_helper.from_array(np.array(0.02, np.float32), "w_scale")]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zero"], "/fc/x_quant"),
        helper.make_node("MatMulInteger", ["x_q", "w_q", "x_zero", "w_zero"], ["acc"], "/fc/MatMul_quant"),
        helper.make_node("Cast", ["acc"], ["acc_f"], "/fc/acc_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"], "/fc/scale_mul"),
        helper.make_node("Mul", ["acc_f", "scale"], ["y"], "/fc/output_mul"),
    ]
    graph = helper.make_graph(nodes, "dyn_quant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    return _model(graph)


def conv_integer_model() -> onnx.ModelProto:
    rng = np.random.RandomState(1)
    inits = [numpy_helper.from_array(rng.randint(0, 256, size=(4, 3, 3, 3)).astype(np.uint8), "w"),
             numpy_helper.from_array(np.array(7, np.uint8), "x_zero")]
    nodes = [helper.make_node("ConvInteger", ["image", "w", "x_zero"], ["acc"], "/stem/conv_int", pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["y"], "/stem/to_float", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "conv_int",
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return _model(graph)


def contrib_ops_model() -> onnx.ModelProto:
    rng = np.random.RandomState(2)
    inits = [numpy_helper.from_array(rng.randn(8, 8).astype(np.float32), "w")]
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w"], ["h"], "/ffn/fused_matmul", domain="com.microsoft", alpha=0.5,
                         transB=1),
        helper.make_node("Gelu", ["h"], ["g"], "/ffn/gelu", domain="com.microsoft"),
        helper.make_node("Relu", ["g"], ["y"], "/ffn/relu"),
    ]
    graph = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return _model(graph, [helper.make_opsetid("com.microsoft", 1)])


def if_model() -> onnx.ModelProto:
    """y = cond ? Det(x) : ReduceMax(x over the matrix axes); Det has no TensorRT importer."""
    out = helper.make_tensor_value_info
    then_branch = helper.make_graph([helper.make_node("Det", ["x"], ["t"], "/branch/det")], "then",
                                    [], [out("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["e"], "/branch/max", axes=[1, 2],
                                                      keepdims=0)], "else", [], [out("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], "/gate/If", then_branch=then_branch, else_branch=else_branch)]
    graph = helper.make_graph(nodes, "if_model", [out("x", TensorProto.FLOAT, [2, 3, 3]),
                                                  out("cond", TensorProto.BOOL, [])],
                              [out("y", TensorProto.FLOAT, [2])])
    return _model(graph)


def local_function_model(body_op: str) -> onnx.ModelProto:
    """y = Scaled(x), a model-local function `custom.Scaled` whose body is body_op(x) * 2."""
    body = [helper.make_node(body_op, ["a"], ["b"], "fn_inner"),
            helper.make_node("Constant", [], ["two"], "fn_two",
                             value=numpy_helper.from_array(np.array(2.0, np.float32))),
            helper.make_node("Mul", ["b", "two"], ["c"], "fn_mul")]
    function = helper.make_function("custom", "Scaled", ["a"], ["c"], body, [helper.make_opsetid("", OPSET)])
    node = helper.make_node("Scaled", ["x"], ["y"], "/head/scaled", domain="custom")
    out = helper.make_tensor_value_info
    graph = helper.make_graph([node], "functions", [out("x", TensorProto.FLOAT, [2, 8])],
                              [out("y", TensorProto.FLOAT, [2, 8])])
    return _model(graph, [helper.make_opsetid("custom", 1)], [function])


def loop_model() -> onnx.ModelProto:
    """Two Loop iterations whose body computes Det of the carried matrix (a scan output)."""
    out = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], "/step/cond"),
         helper.make_node("Identity", ["m_in"], ["m_out"], "/step/carry"),
         helper.make_node("Det", ["m_in"], ["d"], "/step/det")],
        "body", [out("i", TensorProto.INT64, []), out("cond_in", TensorProto.BOOL, []),
                 out("m_in", TensorProto.FLOAT, [3, 3])],
        [out("cond_out", TensorProto.BOOL, []), out("m_out", TensorProto.FLOAT, [3, 3]),
         out("d", TensorProto.FLOAT, [])])
    inits = [numpy_helper.from_array(np.array(2, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go")]
    nodes = [helper.make_node("Loop", ["trips", "go", "m"], ["m_final", "dets"], "/rnn/Loop", body=body)]
    graph = helper.make_graph(nodes, "loop_model", [out("m", TensorProto.FLOAT, [3, 3])],
                              [out("m_final", TensorProto.FLOAT, [3, 3]), out("dets", TensorProto.FLOAT, [2])], inits)
    return _model(graph)
