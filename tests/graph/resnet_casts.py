"""A small ResNet-style model with the no-op Casts exporters write, and its twin without them.

What exporters do (a channels-last ResNet-50 export carries ~300 of them): a
`Cast(to=FLOAT)` on tensors that are FP32 already, after the input Transpose,
after every Relu and Add and before every Conv. The twin is the same graph
with those Casts left out: same node names, weights and graph I/O, so a plan
of one can be compared with a plan of the other node by node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
HEIGHT = WIDTH = 8
CHANNELS = 8
CLASSES = 10


def resnet_style(blocks: int = 3, *, noop_casts: bool = True, seed: int = 0) -> onnx.ModelProto:
    """NHWC input -> Transpose -> stem Conv/BN/Relu -> `blocks` residual blocks -> pool -> Gemm -> logits.

    With `noop_casts`, a `Cast(to=FLOAT)` follows the Transpose, every Relu and every Add, and precedes
    every Conv of a block; the last one writes the graph output `logits` (the graph-output case).
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []
    casts = 0

    def cast(tensor: str) -> str:
        """`tensor` through a no-op Cast (when the model has them)."""
        nonlocal casts
        if not noop_casts:
            return tensor
        casts += 1
        out = f"{tensor}_cast"
        nodes.append(helper.make_node("Cast", [tensor], [out], name=f"/Cast_{casts}", to=FLOAT))
        return out

    def weight(name: str, shape, scale: float = 0.3, offset: float = 0.0) -> str:
        array = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
        weights.append(numpy_helper.from_array(array, name))
        return name

    def conv_bn(scope: str, tensor: str, inputs: int) -> str:
        w = weight(f"{scope}.weight", [CHANNELS, inputs, 3, 3], scale=0.2)
        nodes.append(helper.make_node("Conv", [tensor, w], [f"{scope}/conv"], name=f"{scope}/Conv",
                                      pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        bn = [weight(f"{scope}.bn.{part}", [CHANNELS], scale=0.1, offset=1.0 if part in ("scale", "var") else 0.0)
              for part in ("scale", "bias", "mean", "var")]
        nodes.append(helper.make_node("BatchNormalization", [f"{scope}/conv", *bn], [f"{scope}/bn"],
                                      name=f"{scope}/BatchNormalization", epsilon=1e-5))
        return f"{scope}/bn"

    def relu(scope: str, tensor: str) -> str:
        nodes.append(helper.make_node("Relu", [tensor], [f"{scope}/relu"], name=f"{scope}/Relu"))
        return cast(f"{scope}/relu")

    nodes.append(helper.make_node("Transpose", ["input"], ["nchw"], name="/Transpose", perm=[0, 3, 1, 2]))
    hidden = relu("/stem", conv_bn("/stem", cast("nchw"), inputs=3))
    for index in range(blocks):
        scope = f"/layer{index}"
        branch = relu(f"{scope}/a", conv_bn(f"{scope}/a", cast(hidden), CHANNELS))
        branch = conv_bn(f"{scope}/b", cast(branch), CHANNELS)
        nodes.append(helper.make_node("Add", [branch, hidden], [f"{scope}/add"], name=f"{scope}/Add"))
        hidden = relu(scope, cast(f"{scope}/add"))
    nodes.append(helper.make_node("GlobalAveragePool", [hidden], ["/pool"], name="/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["/pool"], ["/flat"], name="/Flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["/flat", weight("fc.weight", [CLASSES, CHANNELS]),
                                           weight("fc.bias", [CLASSES])], ["/fc"], name="/fc/Gemm", transB=1))
    if noop_casts:
        nodes.append(helper.make_node("Cast", ["/fc"], ["logits"], name="/Cast_out", to=FLOAT))
    else:
        nodes[-1].output[0] = "logits"
    graph = helper.make_graph(nodes, "resnet_style", [helper.make_tensor_value_info("input", FLOAT,
                                                                                   [1, HEIGHT, WIDTH, 3])],
                              [helper.make_tensor_value_info("logits", FLOAT, [1, CLASSES])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def cast_count(model: onnx.ModelProto | onnx.GraphProto) -> int:
    """Cast nodes of a model's main graph (or of the graph given)."""
    graph = model.graph if isinstance(model, onnx.ModelProto) else model
    return sum(node.op_type == "Cast" for node in graph.node)
