"""A decoder whose Loop (or Scan) body reads loop invariants from the enclosing graph.

As a table-structure decoder does: an encoder computes a feature map before the
loop; every step MatMuls the carried state with outer-scope weights and with that
feature map. Under a plan where the encoder stays FP32 and the body computes in
FP16, each invariant needs one conversion, not one per step (issue 21, item 6).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.subgraph_graphs import loop_body_io

F = TensorProto.FLOAT
RNG = np.random.default_rng(21)


def _w(name, shape, scale):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _decoder_step(state: str, out: str) -> list[onnx.NodeProto]:
    """q = state @ Wq; c = q @ memory; out = Tanh(c @ Wo_t + state), with Wo_t = Transpose(Wo) outside."""
    return [helper.make_node("MatMul", [state, "Wq"], ["q"], name="query"),
            helper.make_node("MatMul", ["q", "memory"], ["c"], name="attend"),
            helper.make_node("MatMul", ["c", "Wo_t"], ["o"], name="project"),
            helper.make_node("Add", ["o", state], ["r"], name="residual"),
            helper.make_node("Tanh", ["r"], [out], name="act")]


def _encoder() -> list[onnx.NodeProto]:
    """memory = Tanh(x @ We) (the feature map); side = x @ Wo_t (an FP32 reader of the Transposed weight)."""
    return [helper.make_node("MatMul", ["x", "We"], ["enc"], name="encoder/MatMul"),
            helper.make_node("Tanh", ["enc"], ["memory"], name="encoder/Tanh"),
            helper.make_node("Transpose", ["Wo"], ["Wo_t"], name="encoder/transpose_out", perm=[1, 0]),
            helper.make_node("MatMul", ["x", "Wo_t"], ["side"], name="encoder/side")]


def _weights(width):
    return [_w("We", [width, width], 0.5), _w("Wq", [width, width], 0.4), _w("Wo", [width, width], 0.4)]


def _model(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "loop_invariants", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def loop_decoder(width=8, trips=6) -> onnx.ModelProto:
    """h_{k+1} = step(h_k) for `trips` steps, every h recorded (a Loop scan output)."""
    body = helper.make_graph(
        _decoder_step("h_in", "h_out")
        + [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
           helper.make_node("Identity", ["h_out"], ["h_scan"], name="record")],
        "decoder_body",
        *loop_body_io(width))
    nodes = _encoder() + [helper.make_node("Loop", ["M", "go", "h0"], ["h_final", "h_all"], name="decoder",
                                           body=body)]
    inits = _weights(width) + [numpy_helper.from_array(np.array(trips, np.int64), "M"),
                               numpy_helper.from_array(np.array(True), "go")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [width, width]),
                          helper.make_tensor_value_info("h0", F, [1, width])],
                  [helper.make_tensor_value_info("h_final", F, [1, width]),
                   helper.make_tensor_value_info("h_all", F, [trips, 1, width]),
                   helper.make_tensor_value_info("side", F, [width, width])], inits)


def scan_decoder(width=8) -> onnx.ModelProto:
    """The same step under Scan, adding each step's scanned input y_t to the carried state."""
    body = helper.make_graph(
        [helper.make_node("Add", ["h_in", "y_t"], ["s"], name="feed")] + _decoder_step("s", "h_out")
        + [helper.make_node("Identity", ["h_out"], ["h_scan"], name="record")],
        "decoder_body",
        [helper.make_tensor_value_info("h_in", F, [1, width]),
         helper.make_tensor_value_info("y_t", F, [1, width])],
        [helper.make_tensor_value_info("h_out", F, [1, width]),
         helper.make_tensor_value_info("h_scan", F, [1, width])])
    nodes = _encoder() + [helper.make_node("Scan", ["h0", "ys"], ["h_final", "h_all"], name="decoder", body=body,
                                           num_scan_inputs=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [width, width]),
                          helper.make_tensor_value_info("h0", F, [1, width]),
                          helper.make_tensor_value_info("ys", F, ["steps", 1, width])],
                  [helper.make_tensor_value_info("h_final", F, [1, width]),
                   helper.make_tensor_value_info("h_all", F, ["steps", 1, width]),
                   helper.make_tensor_value_info("side", F, [width, width])], _weights(width))


def nested_decoder(width=8, outer_trips=3, inner_trips=4) -> onnx.ModelProto:
    """A Loop whose body computes ctx = Tanh(Wq * h) (a matrix) and runs an inner Loop over g <- Tanh(g @ ctx + If(...)),
    where the If (inside the inner body) reads the encoder's feature map.

    ctx is invariant for the inner loop (converted once per outer step, in the outer body);
    memory is invariant for both (converted once, in the main graph), even through the If.
    """
    then_branch = helper.make_graph([helper.make_node("MatMul", ["g_in", "memory"], ["t"], name="look")],
                                    "then", [], [helper.make_tensor_value_info("t", F, [1, width])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["g_in"], ["e"], name="skip")],
                                    "else", [], [helper.make_tensor_value_info("e", F, [1, width])])
    inner = helper.make_graph(
        [helper.make_node("MatMul", ["g_in", "ctx"], ["p"], name="mix"),
         helper.make_node("If", ["flag"], ["b"], name="choose", then_branch=then_branch, else_branch=else_branch),
         helper.make_node("Add", ["p", "b"], ["s"], name="sum"),
         helper.make_node("Tanh", ["s"], ["g_out"], name="act"),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="keep_going")],
        "inner_body",
        *loop_body_io(width, counter="j", cond=("c_in", "c_out"), state=("g_in", "g_out"), scan=None))
    outer = helper.make_graph(
        [helper.make_node("Mul", ["Wq", "h_in"], ["ctx_raw"], name="context"),
         helper.make_node("Tanh", ["ctx_raw"], ["ctx"], name="context_act"),
         helper.make_node("Loop", ["N", "go", "h_in"], ["h_out"], name="refine", body=inner),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "outer_body",
        *loop_body_io(width, scan=None))
    nodes = _encoder() + [helper.make_node("Loop", ["M", "go", "h0"], ["h_final"], name="decoder", body=outer)]
    inits = _weights(width) + [numpy_helper.from_array(np.array(outer_trips, np.int64), "M"),
                               numpy_helper.from_array(np.array(inner_trips, np.int64), "N"),
                               numpy_helper.from_array(np.array(True), "go")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [width, width]),
                          helper.make_tensor_value_info("h0", F, [1, width]),
                          helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("h_final", F, [1, width]),
                   helper.make_tensor_value_info("side", F, [width, width])], inits)
