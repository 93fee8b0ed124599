"""Small recurrent models for the builder limit (trtpipe/trt/parser/builder_limits.py): an LSTM or
GRU in each branch of an If on a runtime bool, reading the outer-scope input, random weights;
the branches hand out `Y_h` only (Y unread, as nn.LSTMCell exports do) or `Y` too."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, FEATURES, STEPS = 8, 4, 3
GATES = {"LSTM": 4, "GRU": 3}


def _info(name: str) -> onnx.ValueInfoProto:
    """Y is [steps, directions, batch, hidden], Y_h [directions, batch, hidden]."""
    shape = [1, 1, HIDDEN] if name.endswith("_h") else [STEPS, 1, 1, HIDDEN]
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _weights(op: str, prefix: str, rng) -> list[onnx.TensorProto]:
    g = GATES[op]
    return [numpy_helper.from_array(rng.standard_normal((1, g * HIDDEN, FEATURES)).astype(np.float32), prefix + "W"),
            numpy_helper.from_array(rng.standard_normal((1, g * HIDDEN, HIDDEN)).astype(np.float32), prefix + "R")]


def _recurrent(op: str, prefix: str, read_y: bool, name_y: bool) -> tuple[onnx.NodeProto, list[str]]:
    """The node, and the outputs handed on: [Y_h], or [Y, Y_h] when Y is read; an unread Y is
    omitted (`""`) or, with name_y, named and read by nobody."""
    y, y_h = prefix + "Y", prefix + "Y_h"
    node = helper.make_node(op, ["x", prefix + "W", prefix + "R"], [y if (read_y or name_y) else "", y_h],
                            hidden_size=HIDDEN, name=prefix + op.lower())
    return node, ([y, y_h] if read_y else [y_h])


def recurrent_model(op: str = "LSTM", read_y: bool = False, in_if: bool = True, name_y: bool = False,
                    ) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, FEATURES])
    inputs, nodes, inits = [x], [], []
    if in_if:
        branches = {}
        for side in ("then", "else"):
            node, outs = _recurrent(op, f"{side}_", read_y, name_y)
            inits += _weights(op, f"{side}_", rng)
            branches[side] = helper.make_graph([node], f"{side}_branch", [],
                                               [_info(o) for o in outs])
        names = ["y", "y_h"] if read_y else ["y_h"]
        nodes.append(helper.make_node("If", ["c"], names, name="if", then_branch=branches["then"],
                                      else_branch=branches["else"]))
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        node, names = _recurrent(op, "", read_y, name_y)
        nodes.append(node)
        inits += _weights(op, "", rng)
    outputs = [_info(n) for n in names]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
