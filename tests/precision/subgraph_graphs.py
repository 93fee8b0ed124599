"""Small real models with If/Loop/Scan bodies, for the subgraph tests.

Each body computes with MatMul (or LSTM), reads an outer-scope weight (an
implicit input) and has a weight of its own, so rules, automatic rules and
materialisation all have something to do inside it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(12)
F = TensorProto.FLOAT


def _w(name, shape, scale=0.4):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)



def loop_body_io(width, counter="i", cond=("cond_in", "cond_out"), state=("h_in", "h_out"), scan="h_scan"):
    """A Loop body's inputs (counter, condition, carried state [1, width]) and outputs (condition,
    state, and a scan output of the state unless `scan` is None)."""
    inputs = [helper.make_tensor_value_info(counter, TensorProto.INT64, []),
              helper.make_tensor_value_info(cond[0], TensorProto.BOOL, []),
              helper.make_tensor_value_info(state[0], F, [1, width])]
    outputs = [helper.make_tensor_value_info(cond[1], TensorProto.BOOL, []),
               helper.make_tensor_value_info(state[1], F, [1, width])]
    if scan is not None:
        outputs.append(helper.make_tensor_value_info(scan, F, [1, width]))
    return inputs, outputs

def _model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "subgraph_test", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def if_matmul(width=8, scale_else=1.0) -> onnx.ModelProto:
    """y = If(c) then Tanh(x @ Wa) else Sigmoid(x @ Wb * s); batch dim dynamic.

    Wa is an outer-scope initializer read inside the then-branch; Wb lives in the else-branch.
    """
    then_branch = helper.make_graph(
        [helper.make_node("MatMul", ["h", "Wa"], ["t1"], name="mm"),
         helper.make_node("Tanh", ["t1"], ["t_out"], name="act")],
        "then", [], [helper.make_tensor_value_info("t_out", F, ["batch", 4])])
    else_branch = helper.make_graph(
        [helper.make_node("MatMul", ["h", "Wb"], ["e1"], name="mm"),
         helper.make_node("Mul", ["e1", "s"], ["e2"], name="scale"),
         helper.make_node("Sigmoid", ["e2"], ["e_out"], name="act")],
        "else", [], [helper.make_tensor_value_info("e_out", F, ["batch", 4])],
        [_w("Wb", [width, 4]), numpy_helper.from_array(np.array(scale_else, np.float32), "s")])
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["h"], name="pre"),
        helper.make_node("If", ["c"], ["y0"], name="branch", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Relu", ["y0"], ["y"], name="post"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", width]),
                          helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("y", F, ["batch", 4])],
                  [_w("W0", [width, width]), _w("Wa", [width, 4])])


def loop_carried(width=4, trips=3, x_scale=1.0) -> onnx.ModelProto:
    """h_{k+1} = Tanh(h_k @ W + x): a Loop with a carried state and a scan output of every h."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "x"], ["a"], name="add"),
         helper.make_node("Tanh", ["a"], ["h_out"], name="act"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Identity", ["h_out"], ["h_scan"], name="record")],
        "loop_body",
        *loop_body_io(width))
    nodes = [helper.make_node("Loop", ["M", "true", "h0"], ["h_final", "h_all"], name="steps", body=body)]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "true"), _w("W", [width, width], 0.6)]
    return _model(nodes, [helper.make_tensor_value_info("h0", F, [1, width]),
                          helper.make_tensor_value_info("x", F, [1, width])],
                  [helper.make_tensor_value_info("h_final", F, [1, width]),
                   helper.make_tensor_value_info("h_all", F, [trips, 1, width])], inits)


def scan_rnn(inputs=3, width=4) -> onnx.ModelProto:
    """A tiny Elman RNN written with Scan: h' = Tanh(x_t @ Wx + h @ Wh); sequence length dynamic."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["u"], name="in_proj"),
         helper.make_node("MatMul", ["h", "Wh"], ["v"], name="rec_proj"),
         helper.make_node("Add", ["u", "v"], ["s"], name="add"),
         helper.make_node("Tanh", ["s"], ["h_next"], name="act"),
         helper.make_node("Identity", ["h_next"], ["y_t"], name="emit")],
        "rnn_cell",
        [helper.make_tensor_value_info("h", F, [1, width]), helper.make_tensor_value_info("x_t", F, [1, inputs])],
        [helper.make_tensor_value_info("h_next", F, [1, width]), helper.make_tensor_value_info("y_t", F, [1, width])],
        [_w("Wh", [width, width], 0.5)])
    nodes = [helper.make_node("Scan", ["h0", "xs"], ["h_last", "ys"], name="rnn", body=body, num_scan_inputs=1)]
    return _model(nodes, [helper.make_tensor_value_info("h0", F, [1, width]),
                          helper.make_tensor_value_info("xs", F, ["seq", 1, inputs])],
                  [helper.make_tensor_value_info("h_last", F, [1, width]),
                   helper.make_tensor_value_info("ys", F, ["seq", 1, width])], [_w("Wx", [inputs, width])])


def lstm_in_if(inputs=3, hidden=4) -> onnx.ModelProto:
    """Like silero VAD: an If whose branches each run an LSTM over the sequence."""
    def branch(tag):
        return helper.make_graph(
            [helper.make_node("LSTM", ["xs", f"W_{tag}", f"R_{tag}", f"B_{tag}"], ["", f"h_{tag}"],
                              name="lstm", hidden_size=hidden),
             helper.make_node("Squeeze", [f"h_{tag}", "axes0"], [f"o_{tag}"], name="squeeze")],
            tag, [], [helper.make_tensor_value_info(f"o_{tag}", F, [1, hidden])],
            [_w(f"W_{tag}", [1, 4 * hidden, inputs]), _w(f"R_{tag}", [1, 4 * hidden, hidden]),
             _w(f"B_{tag}", [1, 8 * hidden], 0.1)])
    nodes = [helper.make_node("If", ["c"], ["o"], name="vad", then_branch=branch("a"), else_branch=branch("b"))]
    return _model(nodes, [helper.make_tensor_value_info("xs", F, ["seq", 1, inputs]),
                          helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("o", F, [1, hidden])],
                  [numpy_helper.from_array(np.array([0], np.int64), "axes0")])


def feeds_for(model: onnx.ModelProto, seed=0, sizes=None) -> dict[str, np.ndarray]:
    """Random feeds; symbolic dims take `sizes[name]` (default 2)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (sizes or {}).get(d.dim_param, 2)
                 for d in tensor.shape.dim]
        if tensor.elem_type == TensorProto.BOOL:
            feeds[value.name] = np.array(True)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def if_inside_loop(width=4, trips=3, alternate=False) -> onnx.ModelProto:
    """A Loop whose body holds an If (nested bodies), with a LayerNormalization in one branch.

    `alternate`: the If takes the then-branch on even iterations, the else-branch on odd ones."""
    then_branch = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["p"], name="mm"),
         helper.make_node("LayerNormalization", ["p", "gamma", "beta"], ["q"], name="norm", axis=-1)],
        "then", [], [helper.make_tensor_value_info("q", F, [1, width])])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["h_in"], ["r"], name="neg")],
        "else", [], [helper.make_tensor_value_info("r", F, [1, width])])
    parity = [helper.make_node("Mod", ["i", "two"], ["odd_i"], name="parity"),
              helper.make_node("Equal", ["odd_i", "zero"], ["even"], name="is_even")] if alternate else []
    body = helper.make_graph(
        parity + [helper.make_node("If", ["even" if alternate else "flag"], ["g"], name="choose",
                                   then_branch=then_branch, else_branch=else_branch),
         helper.make_node("Tanh", ["g"], ["h_out"], name="act"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "loop_body",
        *loop_body_io(width, scan=None))
    nodes = [helper.make_node("Loop", ["M", "true", "h0"], ["h_final"], name="steps", body=body)]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"), numpy_helper.from_array(np.array(True), "true"),
             _w("W", [width, width], 0.6), numpy_helper.from_array(np.ones(width, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(width, np.float32), "beta"),
             numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(0, np.int64), "zero")]
    return _model(nodes, [helper.make_tensor_value_info("h0", F, [1, width]),
                          helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("h_final", F, [1, width])], inits)
