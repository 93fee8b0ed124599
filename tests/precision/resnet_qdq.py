"""A small ResNet quantized by ONNX Runtime's `quantize_static` in QDQ format (issue 31).

The float model: a stem Conv+Relu, three residual blocks (Conv+Relu, Conv, Add with the block's
input, Relu), GlobalAveragePool, Flatten, Gemm -> y [1, 10]; He-initialised weights, opset 17.
ONNX Runtime quantizes it as its users targeting TensorRT do: QDQ format, INT8 weights per output
channel, INT8 activations calibrated (MinMax) on a few random images, both symmetric (TensorRT
takes zero points of 0 only: with ONNX Runtime's default asymmetric activations TensorRT-RTX
1.7.1 lowered every Q/DQ to FP32 constants, measured on this model), INT32 bias DQs
(scales input scale x weight scale, far below FP16's normal range). Nothing is written by hand:
the Q/DQ placement and the scales are ONNX Runtime's. `fp32_bias=True` keeps the biases FP32
(ONNX Runtime's `QuantizeBias: False`), the form ModelOpt writes: no DQ on a bias.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = [1, 3, 16, 16]
CHANNELS = 8
BLOCKS = 3


def float_resnet(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x: str, name: str, c_in: int, c_out: int) -> str:
        weight = rng.normal(0, np.sqrt(2.0 / (c_in * 9)), (c_out, c_in, 3, 3)).astype(np.float32)
        bias = rng.normal(0, 0.05, c_out).astype(np.float32)
        inits.extend([numpy_helper.from_array(weight, f"{name}.weight"), numpy_helper.from_array(bias, f"{name}.bias")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.out"], name=name,
                                      pads=[1, 1, 1, 1]))
        return f"{name}.out"

    def relu(x: str, name: str) -> str:
        nodes.append(helper.make_node("Relu", [x], [f"{name}.out"], name=name))
        return f"{name}.out"

    x = relu(conv("x", "stem", 3, CHANNELS), "stem_relu")
    for block in range(BLOCKS):
        inner = relu(conv(x, f"block{block}.conv1", CHANNELS, CHANNELS), f"block{block}.relu1")
        inner = conv(inner, f"block{block}.conv2", CHANNELS, CHANNELS)
        nodes.append(helper.make_node("Add", [inner, x], [f"block{block}.add.out"], name=f"block{block}.add"))
        x = relu(f"block{block}.add.out", f"block{block}.relu2")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool.out"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool.out"], ["flat.out"], name="flatten"))
    inits.extend([numpy_helper.from_array(rng.normal(0, 0.3, (10, CHANNELS)).astype(np.float32), "fc.weight"),
                  numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias")])
    nodes.append(helper.make_node("Gemm", ["flat.out", "fc.weight", "fc.bias"], ["y"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


class _Images:
    """ONNX Runtime's calibration reader: a few images from [0, 1), as trtpipe draws its samples."""

    def __init__(self, count: int = 4, seed: int = 1):
        rng = np.random.default_rng(seed)
        self._feeds = iter([{"x": rng.random(SHAPE, dtype=np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self._feeds, None)


def ort_int8_resnet(fp32_bias: bool = False) -> onnx.ModelProto:
    """`float_resnet` quantized by ONNX Runtime (QDQ, per-channel symmetric INT8 weights)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory() as scratch:
        source, quantized = Path(scratch) / "float.onnx", Path(scratch) / "int8.onnx"
        onnx.save(float_resnet(), str(source))
        quantize_static(str(source), str(quantized), _Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"WeightSymmetric": True, "ActivationSymmetric": True,
                                       "QuantizeBias": not fp32_bias})
        return onnx.load(str(quantized))
