"""Models whose tensors sit at the bottom of FP16's range (issue 21 item 1), built here with random
weights: an audio front end whose power spectrum is mostly below FP16's smallest subnormal, a
normalisation of tiny activations, a Reciprocal of small variances. Each has a downstream network that
holds most of the FLOPs, so a plan that keeps only the tiny region FP32 keeps most FLOPs in FP16."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FRAME, HOP, BINS, FRAMES = 256, 128, 64, 24
SAMPLES = HOP * (FRAMES - 1) + FRAME


def _make(nodes, inputs, outputs, initializers, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "underflow", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _head(rng, source: str, width: int, hidden: int, classes: int, nodes: list, inits: list) -> None:
    """source [rows, width] -> MatMul/Add/Relu x2 -> MatMul -> `y`: the FLOPs of a real classifier head."""
    dims = [width, hidden, hidden, classes]
    current = source
    for index in range(3):
        w = rng.standard_normal([dims[index], dims[index + 1]]) / np.sqrt(dims[index])
        inits += [_const(f"head{index}_w", w), _const(f"head{index}_b", rng.standard_normal(dims[index + 1]) * 0.1)]
        nodes += [helper.make_node("MatMul", [current, f"head{index}_w"], [f"head{index}_mm"], name=f"head{index}_mm"),
                  helper.make_node("Add", [f"head{index}_mm", f"head{index}_b"], [f"head{index}_out"],
                                   name=f"head{index}_add")]
        current = f"head{index}_out"
        if index < 2:
            nodes.append(helper.make_node("Relu", [current], [f"head{index}_relu"], name=f"head{index}_relu"))
            current = f"head{index}_relu"
    nodes[-1].output[0] = "y"


def audio_front_end(seed: int = 0, use_pow: bool = False, eps: bool = True) -> tuple[onnx.ModelProto, dict]:
    """audio [1, 1, SAMPLES] -> framing Conv (windowed DFT basis, re and im) -> power (x*x or Pow) ->
    Add(+1e-10) -> Log -> transpose to [frames, bins] -> a 3-layer MLP head. The input is quiet audio
    (noise of std 1e-5 and a tone of amplitude 2e-4, as a constant-Q/STFT front end of a transcriber sees
    it): the power is mostly below 6e-8 (FP16's smallest subnormal) and at most ~2e-4. `eps=False`: Log reads
    the power itself (no epsilon guard)."""
    rng = np.random.default_rng(seed)
    n = np.arange(FRAME)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / FRAME)
    k = np.arange(1, BINS + 1)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * k * n / FRAME), -np.sin(2 * np.pi * k * n / FRAME)]) * window
    nodes = [helper.make_node("Conv", ["audio", "basis"], ["spec"], name="stft", strides=[HOP]),
             helper.make_node("Split", ["spec", "halves"], ["re", "im"], name="split_re_im", axis=1)]
    inits = [_const("basis", basis[:, None, :]), numpy_helper.from_array(np.array([BINS, BINS], np.int64), "halves"),
             _const("eps", 1e-10)]
    if use_pow:
        inits.append(_const("two", 2.0))
        nodes += [helper.make_node("Pow", ["re", "two"], ["re2"], name="re_sq"),
                  helper.make_node("Pow", ["im", "two"], ["im2"], name="im_sq")]
    else:
        nodes += [helper.make_node("Mul", ["re", "re"], ["re2"], name="re_sq"),
                  helper.make_node("Mul", ["im", "im"], ["im2"], name="im_sq")]
    nodes.append(helper.make_node("Add", ["re2", "im2"], ["power"], name="power"))
    if eps:
        nodes.append(helper.make_node("Add", ["power", "eps"], ["power_eps"], name="add_eps"))
    else:
        inits.remove(next(i for i in inits if i.name == "eps"))
    nodes += [helper.make_node("Log", ["power_eps" if eps else "power"], ["logpower"], name="log"),
              helper.make_node("Squeeze", ["logpower", "axis0"], ["logspec"], name="squeeze"),
              helper.make_node("Transpose", ["logspec"], ["frames"], name="to_frames", perm=[1, 0])]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    # Log-power is ~ -20: the head's first layer normalises it as a trained model's would.
    inits += [_const("centre", -18.0), _const("scale", 0.25)]
    nodes += [helper.make_node("Sub", ["frames", "centre"], ["centred"], name="centre"),
              helper.make_node("Mul", ["centred", "scale"], ["features"], name="scale")]
    _head(rng, "features", BINS, 512, 32, nodes, inits)
    model = _make(nodes, [_value("audio", [1, 1, SAMPLES])], [_value("y", [FRAMES, 32])], inits)
    t = np.arange(SAMPLES)
    audio = rng.standard_normal(SAMPLES) * 1e-5 + 2e-4 * np.sin(2 * np.pi * 9.3 * t / FRAME)
    return model, {"audio": audio.astype(np.float32).reshape(1, 1, SAMPLES)}


def tiny_normalisation(seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """A feature projection whose activations are ~1e-4 (a badly scaled trained layer), normalised over
    the channel axis of NCHW-like [rows, channels] by hand: Sub(mean), Mul(d, d), ReduceMean, Add(eps),
    Sqrt, Div; then an MLP head. The squared deviations (~1e-8) and the variance sit in FP16's subnormals."""
    rng = np.random.default_rng(seed)
    rows, width = 64, 128
    inits = [_const("proj_w", rng.standard_normal([width, width]) * 1e-4 / np.sqrt(width)),
             _const("norm_eps", 1e-12)]
    nodes = [helper.make_node("MatMul", ["x", "proj_w"], ["tiny"], name="proj"),
             helper.make_node("ReduceMean", ["tiny"], ["mean"], name="mean", axes=[0], keepdims=1),
             helper.make_node("Sub", ["tiny", "mean"], ["dev"], name="centre"),
             helper.make_node("Mul", ["dev", "dev"], ["dev2"], name="square"),
             helper.make_node("ReduceMean", ["dev2"], ["var"], name="variance", axes=[0], keepdims=1),
             helper.make_node("Add", ["var", "norm_eps"], ["var_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["var_eps"], ["std"], name="std"),
             helper.make_node("Div", ["dev", "std"], ["normed"], name="normalise")]
    _head(rng, "normed", width, 512, 16, nodes, inits)
    model = _make(nodes, [_value("x", [rows, width])], [_value("y", [rows, 16])], inits, opset=17)
    return model, {"x": rng.standard_normal([rows, width]).astype(np.float32)}


def reciprocal_of_variances(seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """Projected features of small scale (per-channel std 3e-5 .. 3e-3, as a quiet channel's are), their
    local variances (a MatMul averaging the squares of 8 neighbouring channels: 1e-9 .. 1e-5), then
    Reciprocal: a precision weighting feat^2 / var of the features; then an MLP head."""
    rng = np.random.default_rng(seed)
    rows, width = 32, 128
    scales = np.logspace(-4.5, -2.5, width)  # per-channel std: variances 1e-9 .. 1e-5
    proj = rng.standard_normal([width, width]) / np.sqrt(width) * scales
    band = (np.abs(np.arange(width)[:, None] - np.arange(width)[None, :]) < 4) / 7.0
    inits = [_const("proj_w", proj), _const("band", band)]
    nodes = [helper.make_node("MatMul", ["x", "proj_w"], ["feat"], name="proj"),
             helper.make_node("Mul", ["feat", "feat"], ["feat2"], name="square"),
             helper.make_node("MatMul", ["feat2", "band"], ["var"], name="local_variance"),
             helper.make_node("Reciprocal", ["var"], ["precision"], name="reciprocal"),
             helper.make_node("Mul", ["feat2", "precision"], ["weighted"], name="weight")]
    _head(rng, "weighted", width, 512, 16, nodes, inits)
    model = _make(nodes, [_value("x", [rows, width])], [_value("y", [rows, 16])], inits)
    return model, {"x": rng.standard_normal([rows, width]).astype(np.float32)}


