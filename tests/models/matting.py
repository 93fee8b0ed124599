"""A background-matting net shaped like U^2-Net, built here with random weights (nothing
downloaded): a Conv/Relu encoder with MaxPool and a dilated bottleneck, a decoder that
upsamples (Resize) and concatenates the skips, a side output per decoder level (3x3 Conv to
one channel, Resize to full resolution, Sigmoid) and the fused alpha matte (1x1 Conv over
the concatenated side logits, Sigmoid). Every output is a [1, 1, H, W] mask in [0, 1]; the
side outputs are the deep-supervision heads exporters keep.

`logit_gain` scales the side heads' weights: the sharper the masks (larger logits), the
larger the FP16 rounding of the logits, and the lower the PSNR of a faithful FP16 run,
while saturated pixels stay where they are. Output names are numbers, as torch.onnx
writes them for unnamed outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUTPUTS = ("1959", "1960", "1961", "1962")  # the fused matte, then the side outputs


def matting_model(size: int = 64, width: int = 16, logit_gain: float = 1.0, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def weight(name, shape, gain=1.0):
        fan_in = int(np.prod(shape[1:]))
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32), name))
        return name

    def conv(x, cin, cout, name, k=3, dilation=1, relu=True, gain=1.0):
        pad = dilation * (k // 2)
        bias = numpy_helper.from_array((rng.standard_normal(cout) * 0.05).astype(np.float32), f"{name}.bias")
        inits.append(bias)
        nodes.append(helper.make_node("Conv", [x, weight(f"{name}.weight", [cout, cin, k, k], gain), bias.name],
                                      [f"{name}_out"], name=f"/{name}/Conv", pads=[pad] * 4,
                                      dilations=[dilation] * 2, kernel_shape=[k, k]))
        if not relu:
            return f"{name}_out"
        nodes.append(helper.make_node("Relu", [f"{name}_out"], [f"{name}_relu"], name=f"/{name}/Relu"))
        return f"{name}_relu"

    def resize(x, name, sizes=None, scale=None):
        if sizes is not None:
            inits.append(numpy_helper.from_array(np.array(sizes, np.int64), f"{name}.sizes"))
            inputs = [x, "", "", f"{name}.sizes"]
        else:
            inits.append(numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), f"{name}.scales"))
            inputs = [x, "", f"{name}.scales"]
        nodes.append(helper.make_node("Resize", inputs, [f"{name}_out"], name=f"/{name}/Resize", mode="linear"))
        return f"{name}_out"

    def pool(x, name):
        nodes.append(helper.make_node("MaxPool", [x], [f"{name}_out"], name=f"/{name}/MaxPool",
                                      kernel_shape=[2, 2], strides=[2, 2]))
        return f"{name}_out"

    def concat(xs, name):
        nodes.append(helper.make_node("Concat", xs, [f"{name}_out"], name=f"/{name}/Concat", axis=1))
        return f"{name}_out"

    w = width
    e1 = conv(conv("input", 3, w, "stage1.conv1"), w, w, "stage1.conv2")
    e2 = conv(conv(pool(e1, "pool12"), w, 2 * w, "stage2.conv1"), 2 * w, 2 * w, "stage2.conv2")
    e3 = conv(pool(e2, "pool23"), 2 * w, 2 * w, "stage3.conv1")
    b = conv(conv(e3, 2 * w, 2 * w, "stage4.dilated2", dilation=2), 2 * w, 2 * w, "stage4.dilated4", dilation=4)
    d3 = conv(concat([b, e3], "stage3d.cat"), 4 * w, 2 * w, "stage3d.conv")
    d2 = conv(concat([resize(d3, "up32", scale=2.0), e2], "stage2d.cat"), 4 * w, w, "stage2d.conv")
    d1 = conv(concat([resize(d2, "up21", scale=2.0), e1], "stage1d.cat"), 2 * w, w, "stage1d.conv")
    logits = []
    for level, (x, cin) in enumerate(((d1, w), (d2, w), (d3, 2 * w)), start=1):
        side = conv(x, cin, 1, f"side{level}", relu=False, gain=logit_gain)
        logits.append(side if level == 1 else resize(side, f"side{level}.up", sizes=[1, 1, size, size]))
    fused = conv(concat(logits, "outconv.cat"), 3, 1, "outconv", k=1, relu=False, gain=logit_gain / 3.0)
    for name, logit in zip(OUTPUTS, (fused, *logits)):
        nodes.append(helper.make_node("Sigmoid", [logit], [name], name=f"/Sigmoid_{name}"))
    graph = helper.make_graph(
        nodes, "u2net_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, size, size]) for name in OUTPUTS],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    onnx.checker.check_model(model, full_check=True)
    return model


def write_matting_model(path: Path, **kwargs) -> Path:
    onnx.save(matting_model(**kwargs), str(path))
    return path
