"""A small real model with everything `trtpipe-inspect` reports: dynamic dims, external data, an If,
an authored FP16 Cast, Q/DQ, a token-id input, an integer input of unstated range, an op the parser
lacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROWS = 50


def write_everything_model(path: Path) -> Path:
    rng = np.random.RandomState(0)
    table = numpy_helper.from_array(rng.randn(ROWS, 8).astype(np.float32), "emb.weight")  # 1.6 kB: external
    weight = numpy_helper.from_array(rng.randn(8, 8).astype(np.float32), "fc.weight")
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "q.scale")
    zero = numpy_helper.from_array(np.array(0, np.int8), "q.zero")
    then_branch = helper.make_graph([helper.make_node("Identity", ["h"], ["t_out"], name="then_id")], "then", [],
                                    [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"], name="else_neg")], "else", [],
                                    [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Gather", ["emb.weight", "ids"], ["e"], name="embed"),
        helper.make_node("ReduceSum", ["e", "one_axis"], ["pooled"], name="pool", keepdims=0),
        helper.make_node("Add", ["x", "pooled"], ["xa"], name="add_tokens"),
        helper.make_node("Cast", ["xa"], ["x16"], name="to_fp16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["x16"], ["x32"], name="to_fp32", to=TensorProto.FLOAT),
        helper.make_node("QuantizeLinear", ["x32", "q.scale", "q.zero"], ["xq"], name="quant"),
        helper.make_node("DequantizeLinear", ["xq", "q.scale", "q.zero"], ["xd"], name="dequant"),
        helper.make_node("MatMul", ["xd", "fc.weight"], ["h"], name="fc"),
        helper.make_node("Cast", ["step"], ["step_f"], name="step_float", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["step_f"], ["step_sum"], name="step_sum", keepdims=0),
        helper.make_node("Constant", [], ["zero_f"], name="zero_const", value=numpy_helper.from_array(
            np.array(0.0, np.float32))),
        helper.make_node("Greater", ["step_sum", "zero_f"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["branched"], name="branch", then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Mystery", ["branched"], ["y"], name="custom", domain="com.example"),
    ]
    axis = numpy_helper.from_array(np.array([1], np.int64), "one_axis")
    graph = helper.make_graph(
        nodes, "everything",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4]),
         helper.make_tensor_value_info("step", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[table, weight, scale, zero, axis])
    model = helper.make_model(graph, ir_version=8, producer_name="hand-made", producer_version="1.0",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=1024)
    return path
