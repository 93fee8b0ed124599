"""A T5 v1.1 encoder as Hugging Face transformers exports it with the TorchScript exporter.

Built without torch (CI has none), node for node what `torch.onnx.export(T5EncoderModel(
T5Config(feed_forward_proj="gated-gelu", ...)), dynamo=False, opset_version=14)` writes with
transformers 5 (checked against such an export, random weights, nothing downloaded):

- every `T5LayerNorm` starts with `Cast(to=FLOAT)` (`hidden_states.to(torch.float32)`), and the
  residual `Add` after it reads that Cast's output, not the previous Add: the trace records the
  no-op cast as the tensor's new producer;
- RMSNorm as Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x, .) -> Mul(weight, .);
- attention: q/k/v MatMuls reshaped with shapes computed in-graph (Shape -> Gather ->
  Unsqueeze -> Concat), `Mul` of q and of k^T by the SDPA-style scaling 1.0 (T5 does not scale),
  scores + the relative position bias, computed in the first block from `Range`s over the
  sequence length and masked by `Where(mask, bias, finfo(float32).min)`, shared by every block;
- gated-GELU FFN `wo(gelu_new(wi_0 x) * wi_1 x)`, the tanh GELU as Mul(0.5)/Pow(3)/Mul/Add/
  Mul(sqrt(2/pi))/Tanh/Add(1)/Mul; no biases anywhere; MatMul weights are `onnx::MatMul_<n>`
  initializers stored [in, out], the other parameters keep their PyTorch names.

Weights (`T5Weights`): Hugging Face's T5 initialisation, then what trained T5 v1.1 checkpoints
have and random weights lack (`calibrated`): a few "massive" channels that each FFN output
(`wo`) writes hundreds to thousands into, so the residual stream reaches ~1e4 by the last block
(the reason Hugging Face keeps `wo` in FP32), RMSNorm gains that damp the massive channels and
bring the ordinary ones back to unit scale, and `wi_1` units that follow `wi_0` so the massive
channels grow with one sign. The scales are set by a NumPy forward pass of the same model
(`forward`) on calibration tokens, so the model is deterministic to the byte.
`python -m bench.common.t5_torch_export` writes the real export with the same scaling (torch needed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models._builders import GraphBuilder, module_scope, seeded_rng, tensor_info

FLOAT32_MIN = -3.4028234663852886e38
EPS = 1e-6
OPSET = 14


@dataclass(frozen=True)
class T5Shape:
    vocab: int = 512
    d_model: int = 256
    d_kv: int = 32
    heads: int = 8
    d_ff: int = 640
    layers: int = 4
    buckets: int = 32
    max_distance: int = 128


@dataclass
class T5Weights:
    """Parameters by PyTorch name; Linear weights stored [in, out] (as the exporter writes them)."""

    shape: T5Shape
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


def hf_init(shape: T5Shape, rng: np.random.RandomState) -> T5Weights:
    """`T5PreTrainedModel._init_weights` with factor 1.0; RMSNorm gains 1."""
    s, w = shape, T5Weights(shape)
    inner = s.heads * s.d_kv
    w.tensors["shared.weight"] = rng.normal(0.0, 1.0, (s.vocab, s.d_model))
    for i in range(s.layers):
        attention = f"encoder.block.{i}.layer.0.SelfAttention"
        w.tensors[f"{attention}.q.weight"] = rng.normal(0.0, (s.d_model * s.d_kv) ** -0.5, (s.d_model, inner))
        w.tensors[f"{attention}.k.weight"] = rng.normal(0.0, s.d_model ** -0.5, (s.d_model, inner))
        w.tensors[f"{attention}.v.weight"] = rng.normal(0.0, s.d_model ** -0.5, (s.d_model, inner))
        w.tensors[f"{attention}.o.weight"] = rng.normal(0.0, inner ** -0.5, (inner, s.d_model))
        if i == 0:
            w.tensors[f"{attention}.relative_attention_bias.weight"] = rng.normal(
                0.0, s.d_model ** -0.5, (s.buckets, s.heads))
        ffn = f"encoder.block.{i}.layer.1.DenseReluDense"
        w.tensors[f"{ffn}.wi_0.weight"] = rng.normal(0.0, s.d_model ** -0.5, (s.d_model, s.d_ff))
        w.tensors[f"{ffn}.wi_1.weight"] = rng.normal(0.0, s.d_model ** -0.5, (s.d_model, s.d_ff))
        w.tensors[f"{ffn}.wo.weight"] = rng.normal(0.0, s.d_ff ** -0.5, (s.d_ff, s.d_model))
    for name in _norm_names(s):
        w.tensors[name] = np.ones(s.d_model)
    w.tensors = {name: value.astype(np.float32) for name, value in w.tensors.items()}
    return w


def _norm_names(s: T5Shape) -> list[str]:
    names = [f"encoder.block.{i}.layer.{j}.layer_norm.weight" for i in range(s.layers) for j in (0, 1)]
    return names + ["encoder.final_layer_norm.weight"]


# ---------------------------------------------------------------------------------------- NumPy forward


def relative_buckets(s: T5Shape, length: int) -> np.ndarray:
    """T5Attention._relative_position_bucket, bidirectional, [length, length]."""
    relative = np.arange(length)[None, :] - np.arange(length)[:, None]
    half = s.buckets // 2
    exact = half // 2
    buckets = (relative > 0).astype(np.int64) * half
    distance = np.abs(relative)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = exact + (np.log(distance.astype(np.float32) / exact) / math.log(s.max_distance / exact)
                         * (half - exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return buckets + np.where(distance < exact, distance, large)


def _rms(x, gain):
    return gain * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS))


def _gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w: T5Weights, ids: np.ndarray, probe=None) -> np.ndarray:
    """The encoder in float64, all tokens attended; `probe(name, tensor)` sees each norm's input
    (by gain name) and each FFN's `wo` output (by weight name)."""
    s, t = w.shape, w.tensors
    probe = probe or (lambda name, value: None)
    x = t["shared.weight"][ids].astype(np.float32)
    length = ids.shape[-1]
    bias = t["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"][relative_buckets(s, length)]
    bias = bias.transpose(2, 0, 1)[None]
    for i in range(s.layers):
        prefix = f"encoder.block.{i}.layer"
        gain = f"{prefix}.0.layer_norm.weight"
        probe(gain, x)
        h = _rms(x, t[gain])
        attention = f"{prefix}.0.SelfAttention"

        def heads(name):
            return (h @ t[f"{attention}.{name}.weight"]).reshape(*h.shape[:2], s.heads, s.d_kv).transpose(0, 2, 1, 3)

        scores = heads("q") @ heads("k").transpose(0, 1, 3, 2) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ heads("v")
        x = x + context.transpose(0, 2, 1, 3).reshape(*h.shape[:2], -1) @ t[f"{attention}.o.weight"]
        gain = f"{prefix}.1.layer_norm.weight"
        probe(gain, x)
        h = _rms(x, t[gain])
        ffn = f"{prefix}.1.DenseReluDense"
        out = (_gelu_new(h @ t[f"{ffn}.wi_0.weight"]) * (h @ t[f"{ffn}.wi_1.weight"])) @ t[f"{ffn}.wo.weight"]
        probe(f"{ffn}.wo.weight", out)
        x = x + out
    probe("encoder.final_layer_norm.weight", x)
    return _rms(x, t["encoder.final_layer_norm.weight"])


# ------------------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Scales:
    """What `calibrated` gives the random weights (module docstring)."""

    massive: tuple[int, ...] = (17, 101)  # residual channels the FFNs write massive values into
    # Mean a block's FFN adds to them on the calibration tokens: the stream reaches ~1.3e4 by the
    # last block, the FFN outputs 3e3-5.3e3 (beyond max_abs in the middle blocks, well inside FP16).
    growth: float = 3000.0
    # Multiplies wi_0: the GELU's input reaches |x| > 40 on some tokens, where Pow(x, 3) > 65504 (as
    # the built-in t5's GATE_SCALE).
    gate: float = 12.0
    # FF units whose wi_1 follows wi_0 (gelu(a) * a >= 0) and that write the massive channels: a quarter
    # of them, so the massive values are steady from token to token, as trained ones are.
    followers: int = 160
    massive_gain: float = 0.02  # RMSNorm gain of the massive channels
    query: float = 1.0  # multiplies q: how peaked the attention is


class _Seen(Exception):
    """Ends a calibration forward pass once the probed tensor is seen."""


def calibrated(w: T5Weights, scales: Scales, rng: np.random.RandomState, ids: np.ndarray) -> T5Weights:
    """Block by block, in forward order: the norms' gains from the inputs they read, then the FFN's
    massive units scaled so that its output adds `scales.growth` to the massive channels."""
    s, t, massive = w.shape, w.tensors, list(scales.massive)
    ordinary = [c for c in range(s.d_model) if c not in scales.massive]

    def measured(name: str) -> np.ndarray:
        seen = {}

        def probe(key, value):
            if key == name:
                seen[key] = value
                raise _Seen

        try:
            forward(w, ids, probe)
        except _Seen:
            return seen[name]
        raise KeyError(name)

    def set_gain(name: str) -> None:
        x = measured(name)
        rms = np.sqrt(np.mean(x * x, axis=-1)).mean()
        ordinary_rms = np.sqrt(np.mean(x[..., ordinary] ** 2))
        gains = rng.uniform(0.9, 1.1, s.d_model) * rms / ordinary_rms
        gains[massive] = scales.massive_gain
        t[name] = gains.astype(np.float32)

    units = scales.followers
    for i in range(s.layers):
        prefix = f"encoder.block.{i}.layer"
        t[f"{prefix}.0.SelfAttention.q.weight"] = t[f"{prefix}.0.SelfAttention.q.weight"] * scales.query
        set_gain(f"{prefix}.0.layer_norm.weight")
        set_gain(f"{prefix}.1.layer_norm.weight")
        ffn = f"{prefix}.1.DenseReluDense"
        t[f"{ffn}.wi_0.weight"] = t[f"{ffn}.wi_0.weight"] * scales.gate
        t[f"{ffn}.wi_1.weight"][:, :units] = t[f"{ffn}.wi_0.weight"][:, :units] / scales.gate
        wo = t[f"{ffn}.wo.weight"]
        wo[:, massive] = 0.0
        wo[:units, massive] = 1.0
        written = measured(f"{ffn}.wo.weight")[..., massive].mean()
        wo[:units, massive] *= np.float32(scales.growth / written)
    set_gain("encoder.final_layer_norm.weight")
    return w


# ------------------------------------------------------------------------------------------ the graph


class _Export:
    """Writes the graph the way the TorchScript exporter does (module docstring)."""

    def __init__(self, w: T5Weights) -> None:
        self.w, self.s, self.b = w, w.shape, GraphBuilder()
        self._matmul_weights = 0
        lists = ("encoder.block",) + tuple(f"encoder.block.{i}.layer" for i in range(self.s.layers))
        self.scope = lambda name: module_scope(name, module_lists=lists)

    def const(self, scope: str, value, dtype) -> str:
        return self.b.constant(scope, np.array(value, dtype=dtype))

    def param(self, name: str) -> str:
        return self.b.initializer(name, self.w.tensors[name].astype(np.float32))

    def linear(self, module: str, x: str) -> str:
        """`nn.Linear(bias=False)`: the exporter stores the transposed weight as `onnx::MatMul_<n>`."""
        self._matmul_weights += 1
        weight = self.b.initializer(f"onnx::MatMul_{720 + self._matmul_weights}",
                                    self.w.tensors[f"{module}.weight"].astype(np.float32))
        return self.b.node("MatMul", self.scope(module), [x, weight])

    def rms_norm(self, module: str, x: str) -> tuple[str, str]:
        """T5LayerNorm; returns (output, the Cast's output that the residual Add reads)."""
        scope = self.scope(module)
        cast = self.b.node("Cast", scope, [x], to=TensorProto.FLOAT)
        squared = self.b.node("Pow", scope, [cast, self.const(scope, 2.0, np.float32)])
        variance = self.b.node("ReduceMean", scope, [squared], axes=[-1], keepdims=1)
        shifted = self.b.node("Add", scope, [variance, self.const(scope, EPS, np.float32)])
        root = self.b.node("Sqrt", scope, [shifted])
        inverse = self.b.node("Div", scope, [self.const(scope, 1.0, np.float32), root])
        normalised = self.b.node("Mul", scope, [cast, inverse])
        return self.b.node("Mul", scope, [self.param(f"{module}.weight"), normalised]), cast

    def dim(self, scope: str, x: str, axis: int) -> str:
        shape = self.b.node("Shape", scope, [x])
        return self.b.node("Gather", scope, [shape, self.const(scope, axis, np.int64)], axis=0)

    def unsqueezed(self, scope: str, x: str, axis: int) -> str:
        return self.b.node("Unsqueeze", scope, [x, self.const(scope, [axis], np.int64)])

    def model(self, ids: str = "input_ids", mask: str = "attention_mask") -> onnx.ModelProto:
        s, b = self.s, self.b
        hidden = b.node("Gather", self.scope("encoder.embed_tokens"), [self.param("shared.weight"), ids])
        scope = self.scope("encoder")
        keep = b.node("Cast", scope, [mask], to=TensorProto.BOOL)
        keep = self.unsqueezed(scope, self.unsqueezed(scope, keep, 1), 2)  # [batch, 1, 1, keys]
        position_bias = None
        for i in range(s.layers):
            prefix = f"encoder.block.{i}.layer"
            normed, residual = self.rms_norm(f"{prefix}.0.layer_norm", hidden)
            attention, position_bias = self.attention(f"{prefix}.0.SelfAttention", normed, keep, position_bias)
            hidden = b.node("Add", self.scope(f"{prefix}.0"), [residual, attention])
            normed, residual = self.rms_norm(f"{prefix}.1.layer_norm", hidden)
            hidden = b.node("Add", self.scope(f"{prefix}.1"),
                            [residual, self.gated_gelu(f"{prefix}.1.DenseReluDense", normed)])
        out, _ = self.rms_norm("encoder.final_layer_norm", hidden)
        b.rename_tensor(out, "last_hidden_state")
        return b.model(
            "main_graph",
            inputs=[onnx.helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
                    onnx.helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"])],
            outputs=[onnx.helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                                        ["batch", "seq", s.d_model])],
            opset=OPSET,
            doc_string="T5 v1.1 encoder as transformers exports it (TorchScript exporter), random weights",
        )

    def attention(self, module: str, x: str, keep: str, position_bias: str | None) -> tuple[str, str]:
        s, b, scope = self.s, self.b, self.scope(module)
        batch, length = self.dim(scope, x, 0), self.dim(scope, x, 1)

        def heads(name: str, perm: list[int]) -> str:
            shape = b.node("Concat", scope, [self.unsqueezed(scope, batch, 0), self.unsqueezed(scope, length, 0),
                                             self.const(scope, [-1], np.int64),
                                             self.const(scope, [s.d_kv], np.int64)], axis=0)
            reshaped = b.node("Reshape", scope, [self.linear(f"{module}.{name}", x), shape])
            return b.node("Transpose", scope, [reshaped], perm=perm)

        query, key, value = heads("q", [0, 2, 1, 3]), heads("k", [0, 2, 3, 1]), heads("v", [0, 2, 1, 3])
        query = b.node("Mul", scope, [query, self.const(scope, 1.0, np.float32)])  # SDPA's sqrt(scaling)
        key = b.node("Mul", scope, [key, self.const(scope, 1.0, np.float32)])
        if position_bias is None:
            position_bias = self.position_bias(module, length, keep)
        scores = b.node("Add", scope, [b.node("MatMul", scope, [query, key]), position_bias])
        weights = b.node("Softmax", scope, [scores], axis=-1)
        context = b.node("Transpose", scope, [b.node("MatMul", scope, [weights, value])], perm=[0, 2, 1, 3])
        merged = b.node("Concat", scope, [self.unsqueezed(scope, batch, 0), self.unsqueezed(scope, length, 0),
                                          self.const(scope, [-1], np.int64)], axis=0)
        context = b.node("Reshape", scope, [context, merged])
        return self.linear(f"{module}.o", context), position_bias

    def position_bias(self, module: str, length: str, keep: str) -> str:
        """`compute_bias` (bidirectional buckets of memory - context positions), masked: [batch, H, S, S]."""
        s, b, scope = self.s, self.b, self.scope(module)
        half = s.buckets // 2
        exact = half // 2
        count = b.node("Cast", scope, [length], to=TensorProto.INT64)
        zero, one = self.const(scope, 0, np.int64), self.const(scope, 1, np.int64)
        context = self.unsqueezed(scope, b.node("Range", scope, [zero, count, one]), 1)
        memory = self.unsqueezed(scope, b.node("Range", scope, [zero, count, one]), 0)
        relative = b.node("Sub", scope, [memory, context])
        forward_ = b.node("Cast", scope, [b.node("Greater", scope, [relative, self.const(scope, 0, np.int64)])],
                          to=TensorProto.INT64)
        buckets = b.node("Add", scope, [b.node("Mul", scope, [forward_, self.const(scope, half, np.int64)]),
                                        self.const(scope, 0, np.int64)])
        distance = b.node("Abs", scope, [relative])
        is_small = b.node("Less", scope, [distance, self.const(scope, exact, np.int64)])
        ratio = b.node("Div", scope, [b.node("Cast", scope, [distance], to=TensorProto.FLOAT),
                                      self.const(scope, float(exact), np.float32)])
        scaled = b.node("Div", scope, [b.node("Log", scope, [ratio]),
                                       self.const(scope, math.log(s.max_distance / exact), np.float32)])
        scaled = b.node("Mul", scope, [scaled, self.const(scope, float(half - exact), np.float32)])
        large = b.node("Add", scope, [b.node("Cast", scope, [scaled], to=TensorProto.INT64),
                                      self.const(scope, exact, np.int64)])
        ceiling = b.node("ConstantOfShape", scope, [b.node("Shape", scope, [large])],
                         value=onnx.numpy_helper.from_array(np.array([half - 1], np.int64)))
        chosen = b.node("Where", scope, [is_small, distance, b.node("Min", scope, [large, ceiling])])
        buckets = b.node("Add", scope, [buckets, chosen])
        table = self.param(f"{module}.relative_attention_bias.weight")
        values = b.node("Gather", self.scope(f"{module}.relative_attention_bias"), [table, buckets])
        values = self.unsqueezed(scope, b.node("Transpose", scope, [values], perm=[2, 0, 1]), 0)
        return b.node("Where", scope, [keep, values, self.const(scope, FLOAT32_MIN, np.float32)])

    def gated_gelu(self, module: str, x: str) -> str:
        """T5DenseGatedActDense: wo(gelu_new(wi_0 x) * wi_1 x)."""
        b, act = self.b, self.scope(f"{module}.act")
        gate = self.linear(f"{module}.wi_0", x)
        half = b.node("Mul", act, [gate, self.const(act, 0.5, np.float32)])
        cubed = b.node("Pow", act, [gate, self.const(act, 3.0, np.float32)])
        inner = b.node("Add", act, [gate, b.node("Mul", act, [cubed, self.const(act, 0.044715, np.float32)])])
        inner = b.node("Mul", act, [inner, self.const(act, math.sqrt(2.0 / math.pi), np.float32)])
        gelu = b.node("Mul", act, [half, b.node("Add", act, [b.node("Tanh", act, [inner]),
                                                               self.const(act, 1.0, np.float32)])])
        product = b.node("Mul", self.scope(module), [gelu, self.linear(f"{module}.wi_1", x)])
        return self.linear(f"{module}.wo", product)


SEQUENCE = 32
INPUT_SPECS = {"input_ids": {"low": 0, "high": T5Shape().vocab, "dtype": "int64", "shape": [1, SEQUENCE]},
               "attention_mask": {"low": 1, "high": 2, "dtype": "int64", "shape": [1, SEQUENCE]}}


def build_hf_t5(shape: T5Shape = T5Shape(), scales: Scales = Scales(), seed: int = 2121) -> onnx.ModelProto:
    rng = seeded_rng(seed)
    weights = hf_init(shape, rng)
    ids = rng.randint(0, shape.vocab, (4, SEQUENCE))
    return _Export(calibrated(weights, scales, rng, ids)).model()
