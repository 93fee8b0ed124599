"""Small explicitly quantized (Q/DQ) models, written as ModelOpt and ONNX Runtime write them (issue 31).

x [1, 3, 16, 16] -> Q/DQ (per tensor) -> Conv (weight DQ per output channel, axis 0) -> Relu -> Q/DQ
-> Flatten -> MatMul (weight DQ per tensor) -> y [1, 10].

- `int8`: ModelOpt's INT8 form: INT8 weights stored quantized, each feeding its DQ, FP32 scales,
  zero points 0, an FP32 Conv bias.
- `fp8`: ModelOpt's FP8 form: FP32 weights quantized by a QuantizeLinear to float8e4m3fn and read
  back by a DequantizeLinear (opset 19 or 21), FP8 zero points.
- `ort_bias`: ONNX Runtime's QDQ form: `int8` with the Conv bias stored INT32 and read through a
  DequantizeLinear whose per-channel scales are input scale x weight scale, 7.5e-8 to 1.5e-6.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = [1, 3, 16, 16]
# ONNX Runtime's INT32 bias scales on a ResNet-18 run from 7.5e-8 to 1.5e-6 (issue 31).
BIAS_SCALES = np.geomspace(7.5e-8, 1.5e-6, 8).astype(np.float32)


def _zero_point(name: str, kind: str, shape: tuple = ()) -> onnx.TensorProto:
    if kind == "fp8":
        return helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, list(shape), [0.0] * int(np.prod(shape)))
    return numpy_helper.from_array(np.zeros(shape, np.int8), name)


def qdq_model(kind: str = "int8", opset: int = 19, ort_bias: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    code_max = 448.0 if kind == "fp8" else 127.0

    def activation(x: str, name: str, scale: float) -> str:
        inits.extend([numpy_helper.from_array(np.float32(scale), f"{name}_s"), _zero_point(f"{name}_zp", kind)])
        nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_zp"], [f"{name}_q"], name=f"{name}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_zp"], [f"{name}_dq"],
                                      name=f"{name}_DQ"))
        return f"{name}_dq"

    def weight(name: str, values: np.ndarray, per_channel: bool) -> str:
        flat = np.abs(values).reshape(values.shape[0], -1).max(1) if per_channel else np.abs(values).max()
        scale = (flat / code_max).astype(np.float32)
        axis = {"axis": 0} if per_channel else {}
        zp_shape = (values.shape[0],) if per_channel else ()
        inits.extend([numpy_helper.from_array(scale, f"{name}_s"), _zero_point(f"{name}_zp", kind, zp_shape)])
        if kind == "fp8":
            inits.append(numpy_helper.from_array(values, name))
            nodes.append(helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_zp"], [f"{name}_q"],
                                          name=f"{name}_Q", **axis))
        else:
            divided = values / (scale.reshape(-1, *[1] * (values.ndim - 1)) if per_channel else scale)
            inits.append(numpy_helper.from_array(np.clip(np.round(divided), -127, 127).astype(np.int8), f"{name}_q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_zp"], [f"{name}_dq"],
                                      name=f"{name}_DQ", **axis))
        return f"{name}_dq"

    x = activation("x", "in", 0.02)
    w = weight("w", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), per_channel=True)
    bias = rng.normal(0, 0.1, 8).astype(np.float32)
    if ort_bias:
        inits.extend([numpy_helper.from_array(np.round(bias / BIAS_SCALES).astype(np.int32), "b_q"),
                      numpy_helper.from_array(BIAS_SCALES, "b_s"),
                      numpy_helper.from_array(np.zeros(8, np.int32), "b_zp")])
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["b"], name="b_DQ", axis=0))
    else:
        inits.append(numpy_helper.from_array(bias, "b"))
    nodes.append(helper.make_node("Conv", [x, w, "b"], ["c"], name="conv", pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
    r = activation("r", "mid", 0.02)
    nodes.append(helper.make_node("Flatten", [r], ["f"], name="flatten"))
    m = weight("m", rng.normal(0, 0.05, (8 * 16 * 16, 10)).astype(np.float32), per_channel=False)
    nodes.append(helper.make_node("MatMul", ["f", m], ["y"], name="fc"))
    graph = helper.make_graph(nodes, f"qdq_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model



def ort_quantized_pair(directory, quantize_bias: bool = True) -> tuple:
    """(float model, its QDQ model) written in `directory` by ONNX Runtime's own `quantize_static`
    (QDQ format, per-channel, symmetric INT8), so the bias DequantizeLinears are exactly what it writes: INT32
    codes with INT32 zero points, per axis 0, feeding Conv input 2 and Gemm input 2. `quantize_bias=False`
    (its `QuantizeBias` option) leaves the biases FP32 and unquantized.

    x [1, 3, 16, 16] -> Conv+Relu -> Conv+Relu -> GlobalAveragePool -> Flatten -> Gemm -> y [1, 10]; opset 17.
    Calibrated on 4 seeded uniform inputs."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x: str, channels_in: int, name: str) -> str:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (8, channels_in, 3, 3)).astype(np.float32), f"{name}_w"))
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), f"{name}_b"))
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_o"], name=name, pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"{name}_o"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    h = conv(conv("x", 3, "c1"), 8, "c2")
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["p"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"], name="flat"))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (8, 10)).astype(np.float32), "fc_w"))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (10,)).astype(np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc"))
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return _quantized_by_ort(directory, graph, rng, {"QuantizeBias": quantize_bias})


def ort_quantized_mlp(directory, depth: int = 16, width: int = 64, tail_offset: float | None = None,
                      activation_symmetric: bool = True) -> tuple:
    """(float model, its QDQ model) by ONNX Runtime's `quantize_static` as `ort_quantized_pair` makes them:
    x [4, width] -> `depth` x (Gemm + Relu) -> MatMul -> y [4, 10], He-initialised, opset 17.

    A deep chain of quantizers: FP16 moves some activation codes by one step and each flip feeds the
    next quantizer (the ModelOpt INT8 CNNs of bench/quantized: about a third of the codes differ by the
    end), so the FP16 candidate is further from the QDQ model than the default bound while no further
    from the float model than the QDQ model itself.

    `tail_offset`: y is computed as `(MatMul * 50 + offset) - offset` with only the Gemms quantized: in
    FP16 the offset's spacing (16 at 2^14..2^15) swamps the signal, an FP16 error of the model's own,
    not of its quantization.

    `activation_symmetric=False`: ONNX Runtime's default, asymmetric activations; it then deletes each
    Relu whose range the next QuantizeLinear clips to (zero point -128)."""
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    nodes, inits, h = [], [], "x"
    for i in range(depth):
        inits.append(nh.from_array((rng.normal(0, 1, (width, width)) * np.sqrt(2 / width)).astype(np.float32), f"w{i}"))
        inits.append(nh.from_array(rng.normal(0, 0.1, (width,)).astype(np.float32), f"b{i}"))
        nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [f"g{i}"], name=f"fc{i}"))
        nodes.append(helper.make_node("Relu", [f"g{i}"], [f"r{i}"], name=f"relu{i}"))
        h = f"r{i}"
    inits.append(nh.from_array((rng.normal(0, 1, (width, 10)) * np.sqrt(1 / width)).astype(np.float32), "wo"))
    nodes.append(helper.make_node("MatMul", [h, "wo"], ["y" if tail_offset is None else "m"], name="out"))
    options = {}
    if tail_offset is not None:
        inits += [nh.from_array(np.float32(50.0), "gain"), nh.from_array(np.float32(tail_offset), "offset")]
        nodes += [helper.make_node("Mul", ["m", "gain"], ["scaled"], name="gain_mul"),
                  helper.make_node("Add", ["scaled", "offset"], ["shifted"], name="offset_add"),
                  helper.make_node("Sub", ["shifted", "offset"], ["y"], name="offset_sub")]
        options["op_types_to_quantize"] = ["Gemm"]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
    return _quantized_by_ort(directory, graph, rng, {"ActivationSymmetric": activation_symmetric}, **options)


def _quantized_by_ort(directory, graph: onnx.GraphProto, rng, extra: dict, **options) -> tuple:
    """Write `graph` as float.onnx (opset 17) and quantize it as issue 31 did with ONNX Runtime: QDQ, per
    channel, symmetric INT8, calibrated on 4 seeded uniform inputs of the graph's input shape."""
    from pathlib import Path

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    directory = Path(directory)
    shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    float_path, qdq_path = directory / "float.onnx", directory / "qdq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(float_path))

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{graph.input[0].name: rng.random(shape, dtype=np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    # Symmetric, as issue 31 quantized with ONNX Runtime: TensorRT's INT8 needs zero points 0.
    quantize_static(str(float_path), str(qdq_path), Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, **extra}, **options)
    return float_path, qdq_path
