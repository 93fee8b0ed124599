"""A wide BERT-like encoder over 2 GB, written straight to external data, for `scale.py`.

`write_encoder(dir, hidden, layers)` writes `encoder.onnx` and `encoder.onnx.data`:
a post-LN encoder of `layers` layers as `torch.onnx.export` writes one at opset 13
(the structure of trtpipe/models/transformer.py, without the embedding table):

    x: float32 [1, 16, hidden]
    per layer: Q/K/V MatMul+Add -> Reshape/Transpose into heads -> MatMul, Div(sqrt(d)),
               Softmax -> MatMul -> Transpose/Reshape -> output MatMul+Add -> Add(residual)
               -> decomposed LayerNorm (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add,
               last axis) -> FFN MatMul+Add (4x) -> GELU via Erf -> MatMul+Add
               -> Add(residual) -> decomposed LayerNorm
    output: last_hidden_state float32 [1, 16, hidden]

Decisions:
- The weights never exist twice in memory: each initializer is drawn, appended
  to the `.data` file (4 KiB aligned, as trtpipe's `save_model` writes it) and
  dropped; the ModelProto holds only external references. Peak memory of the
  generation is one FFN weight (4 * hidden^2 float32).
- Weights ~ uniform with std 1/sqrt(fan_in), LayerNorm gain 1 and bias 0, so the
  FP32 activations stay O(1): the precision stage's range rule has nothing to
  keep in FP32 beyond the LayerNorms (what is measured is the machinery, not
  the rules firing).
- Deterministic for a given NumPy: `np.random.Generator(PCG64(seed))`, uniform
  float32 draws (NumPy's fastest generator; 700 M draws in a few seconds, where
  `RandomState.normal` takes ~20 s). NumPy does not freeze this stream across
  releases (NEP 19); the benchmark needs a fixed model per run, not per release.
- Every float tensor of at least 1 KiB is external (onnx's own default
  threshold); shape constants (int64) and scalars stay inline.
- Static shapes, constant Reshape targets: what the exporter leaves for a fixed
  input shape, and what avoids a dynamic dimension without a profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 7
SEQUENCE = 16
HEAD_DIM = 64
FFN_FACTOR = 4
LAYER_NORM_EPS = 1e-12
SEED = 2024
EXTERNAL_MIN_BYTES = 1024
ALIGNMENT = 4096
MODEL_NAME = "encoder.onnx"


@dataclass
class EncoderFiles:
    model: Path
    data: Path
    hidden: int
    layers: int
    nodes: int
    initializers: int
    weight_bytes: int

    @property
    def size_bytes(self) -> int:
        return self.model.stat().st_size + self.data.stat().st_size


class _ExternalWriter:
    """Builds initializers whose bytes go straight to the open `.data` file."""

    def __init__(self, data_file, location: str) -> None:
        self.file, self.location = data_file, location
        self.initializers: list[TensorProto] = []
        self.weight_bytes = 0

    def add(self, name: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        self.weight_bytes += array.nbytes
        if array.nbytes < EXTERNAL_MIN_BYTES or array.dtype != np.float32:
            self.initializers.append(numpy_helper.from_array(array, name))
            return name
        self.file.write(b"\0" * (-self.file.tell() % ALIGNMENT))
        offset = self.file.tell()
        self.file.write(array.tobytes())
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", offset), ("length", array.nbytes)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self.initializers.append(tensor)
        return name


class _Encoder:
    def __init__(self, weights: _ExternalWriter, rng: np.random.Generator, hidden: int) -> None:
        self.weights, self.rng, self.hidden = weights, rng, hidden
        self.heads = hidden // HEAD_DIM
        self.nodes: list[onnx.NodeProto] = []
        self.shared = {
            "pow2": weights.add("const.two", np.array(2.0, np.float32)),
            "eps": weights.add("const.eps", np.array(LAYER_NORM_EPS, np.float32)),
            "sqrt_d": weights.add("const.sqrt_head_dim", np.array(np.sqrt(HEAD_DIM), np.float32)),
            "sqrt2": weights.add("const.sqrt2", np.array(np.sqrt(2.0), np.float32)),
            "one": weights.add("const.one", np.array(1.0, np.float32)),
            "half": weights.add("const.half", np.array(0.5, np.float32)),
            "heads_shape": weights.add(
                "const.heads_shape", np.array([1, SEQUENCE, self.heads, HEAD_DIM], np.int64)
            ),
            "hidden_shape": weights.add("const.hidden_shape", np.array([1, SEQUENCE, hidden], np.int64)),
        }

    def node(self, op: str, scope: str, inputs: list[str], **attributes) -> str:
        name = f"{scope}/{op}_{len(self.nodes)}"
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attributes))
        return output

    def linear(self, prefix: str, x: str, fan_in: int, fan_out: int) -> str:
        bound = np.float32(np.sqrt(3.0 / fan_in))  # uniform(-b, b) has std 1/sqrt(fan_in)
        weight = self.rng.random((fan_in, fan_out), dtype=np.float32)
        weight *= 2 * bound
        weight -= bound
        w = self.weights.add(f"{prefix}.weight", weight)
        del weight
        b = self.weights.add(f"{prefix}.bias", (self.rng.random(fan_out, dtype=np.float32) - 0.5) * 0.02)
        product = self.node("MatMul", prefix, [x, w])
        return self.node("Add", prefix, [b, product])  # the exporter's Add(bias, product)

    def layer_norm(self, prefix: str, x: str) -> str:
        gain = self.weights.add(f"{prefix}.weight", np.ones(self.hidden, np.float32))
        shift = self.weights.add(f"{prefix}.bias", np.zeros(self.hidden, np.float32))
        mean = self.node("ReduceMean", prefix, [x], axes=[-1], keepdims=1)
        centred = self.node("Sub", prefix, [x, mean])
        squared = self.node("Pow", prefix, [centred, self.shared["pow2"]])
        variance = self.node("ReduceMean", prefix, [squared], axes=[-1], keepdims=1)
        shifted = self.node("Add", prefix, [variance, self.shared["eps"]])
        std = self.node("Sqrt", prefix, [shifted])
        normalised = self.node("Div", prefix, [centred, std])
        scaled = self.node("Mul", prefix, [normalised, gain])
        return self.node("Add", prefix, [scaled, shift])

    def attention(self, prefix: str, x: str) -> str:
        h = self.hidden

        def heads(tensor: str, perm: list[int]) -> str:
            reshaped = self.node("Reshape", prefix, [tensor, self.shared["heads_shape"]])
            return self.node("Transpose", prefix, [reshaped], perm=perm)

        query = heads(self.linear(f"{prefix}.query", x, h, h), [0, 2, 1, 3])
        key = heads(self.linear(f"{prefix}.key", x, h, h), [0, 2, 3, 1])
        value = heads(self.linear(f"{prefix}.value", x, h, h), [0, 2, 1, 3])
        scores = self.node("MatMul", prefix, [query, key])
        scores = self.node("Div", prefix, [scores, self.shared["sqrt_d"]])
        probabilities = self.node("Softmax", prefix, [scores], axis=-1)
        context = self.node("MatMul", prefix, [probabilities, value])
        context = self.node("Transpose", prefix, [context], perm=[0, 2, 1, 3])
        return self.node("Reshape", prefix, [context, self.shared["hidden_shape"]])

    def gelu(self, prefix: str, x: str) -> str:
        scaled = self.node("Div", prefix, [x, self.shared["sqrt2"]])
        erf = self.node("Erf", prefix, [scaled])
        shifted = self.node("Add", prefix, [erf, self.shared["one"]])
        gated = self.node("Mul", prefix, [x, shifted])
        return self.node("Mul", prefix, [gated, self.shared["half"]])

    def layer(self, prefix: str, x: str) -> str:
        h, ffn = self.hidden, FFN_FACTOR * self.hidden
        attended = self.attention(f"{prefix}.attention.self", x)
        attended = self.linear(f"{prefix}.attention.output.dense", attended, h, h)
        x = self.node("Add", f"{prefix}.attention.output", [attended, x])
        x = self.layer_norm(f"{prefix}.attention.output.LayerNorm", x)
        inner = self.gelu(f"{prefix}.intermediate", self.linear(f"{prefix}.intermediate.dense", x, h, ffn))
        out = self.linear(f"{prefix}.output.dense", inner, ffn, h)
        x = self.node("Add", f"{prefix}.output", [out, x])
        return self.layer_norm(f"{prefix}.output.LayerNorm", x)


def write_encoder(directory: Path, hidden: int, layers: int, seed: int = SEED) -> EncoderFiles:
    """Write the encoder into `directory` (replacing an earlier one); see the module docstring."""
    if hidden % HEAD_DIM:
        raise ValueError(f"hidden {hidden} is not a multiple of the head size {HEAD_DIM}")
    directory.mkdir(parents=True, exist_ok=True)
    model_path = directory / MODEL_NAME
    data_path = directory / (MODEL_NAME + ".data")
    rng = np.random.Generator(np.random.PCG64(seed))
    with open(data_path, "wb") as data_file:
        weights = _ExternalWriter(data_file, data_path.name)
        encoder = _Encoder(weights, rng, hidden)
        x = "x"
        for index in range(layers):
            x = encoder.layer(f"encoder.layer.{index}", x)
    last = encoder.nodes[-1]
    last.output[0] = "last_hidden_state"
    graph = helper.make_graph(
        encoder.nodes,
        f"wide_encoder_{layers}x{hidden}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQUENCE, hidden])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, SEQUENCE, hidden])],
        initializer=weights.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name="trtpipe-bench-scale",
    )
    model_path.write_bytes(model.SerializeToString())
    return EncoderFiles(model_path, data_path, hidden, layers, len(encoder.nodes),
                        len(weights.initializers), weights.weight_bytes)
