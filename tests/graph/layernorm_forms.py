"""Decomposed LayerNorms as other exporters write them (real ONNX graphs, onnx.helper).

`layernorm_form(variance, normalise)` writes `y = LayerNorm(x) over the last axis`
followed by a MatMul (so a plan has FP16 work around the norm):

- variance: `centred_pow` (torch), `centred_mul` (tf2onnx SquaredDifference),
  `moments_mul` / `moments_pow` (E[x^2] - E[x]^2), `jax2tf` (E[x^2] - E[x]^2 as
  magika's export writes it: ReduceSum keepdims=0 times 1/N, Max(0, .),
  Reshape + Expand back to the keepdims shape; fused too), and `gap_` + a variance name: every
  mean written as `GlobalAveragePool`, as tf2onnx's GlobalPoolOptimizer rewrites a ReduceMean over
  axes [2, rank) at opset < 18 (a Keras LayerNormalization of a [B, T, C] tensor: axes [2]).
- normalise: `div`, `reciprocal` (Sqrt + Reciprocal then Mul), `rsqrt` (torch.rsqrt:
  Div(1, Sqrt) then Mul), `reciprocal_gamma`
  (gamma folded into 1/std), `keras` (x * inv + (beta - mean * inv)).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = (2, 6, 16)
FORMS = [  # (variance, normalise): every pattern family, and magika's form
    ("centred_pow", "div"), ("centred_mul", "reciprocal"), ("centred_mul", "keras"),
    ("moments_mul", "div"), ("moments_pow", "reciprocal"), ("moments_mul", "reciprocal_gamma"),
    ("moments_mul", "keras"), ("moments_pow", "rsqrt"), ("jax2tf", "reciprocal_gamma"),
    ("gap_centred_mul", "keras"), ("gap_moments_mul", "reciprocal"), ("gap_centred_pow", "div"),
]


def layernorm_form(variance: str, normalise: str, affine: bool = True, shape=SHAPE, opset: int = 17,
                   axes=(-1,), eps_input: bool = False, count: int | None = None,
                   dynamic: int = 0, gamma_shape=None) -> onnx.ModelProto:
    """`gamma_shape`: of gamma and beta (default: [width]; [C, 1, 1] is an instance norm's per-channel
    affine over an NCHW x); `count`: the N of jax2tf's 1/N (default: the true one); `dynamic`: how many leading dims of x
    are named (`d0`, `d1`, ...); jax2tf's Reshape target is then computed from Shape(x), as jax2tf
    writes it."""
    width = shape[-1]
    rng = np.random.default_rng(3)
    consts = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
              "one_over_n": np.array(1.0 / (count or width), np.float32), "zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32),
              "gamma": rng.uniform(0.5, 1.5, gamma_shape or width).astype(np.float32),
              "beta": rng.uniform(-0.5, 0.5, gamma_shape or width).astype(np.float32),
              "w": rng.normal(0, 0.2, (width, 8)).astype(np.float32),
              "axes": np.array(axes, np.int64), "kept": np.array([*shape[:-1], 1], np.int64)}
    nodes = []

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=f"/ln/{op}_{len(nodes)}", **attrs))
        return output

    def reduce_mean(source, output):
        if gap:  # tf2onnx's GlobalPoolOptimizer: a ReduceMean over [2, rank) becomes GlobalAveragePool
            return node("GlobalAveragePool", [source], output)
        if opset >= 18:
            return node("ReduceMean", [source, "axes"], output, keepdims=1)
        return node("ReduceMean", [source], output, axes=list(axes), keepdims=1)

    def square(source, output, how):
        return node("Pow", [source, "two"], output) if how == "pow" else node("Mul", [source, source], output)

    eps = "eps_in" if eps_input else "eps"
    centered = None
    gap = variance.startswith("gap_")
    variance = variance.removeprefix("gap_")
    if variance.startswith("centred"):
        mean = reduce_mean("x", "mean")
        centered = node("Sub", ["x", mean], "centered")
        var = reduce_mean(square(centered, "sq", variance.split("_")[1]), "var")
    elif variance.startswith("moments"):
        how = variance.split("_")[1]
        mean = reduce_mean("x", "mean")
        var = node("Sub", [reduce_mean(square("x", "x_sq", how), "second"), square(mean, "mean_sq", how)], "var")
    else:  # jax2tf: keepdims=0 sums, Max(0, .), Reshape + Expand back
        if dynamic:
            consts.update(starts=np.array([0], np.int64), ends=np.array([len(shape) - 1], np.int64),
                          unit=np.array([1], np.int64))
            leading = node("Slice", [node("Shape", ["x"], "x_shape"), "starts", "ends"], "leading")
            node("Concat", [leading, "unit"], "kept_dynamic", axis=0)
        flat_mean = node("Mul", [node("ReduceSum", ["x", "axes"], "sum", keepdims=0), "one_over_n"], "flat_mean")
        second = node("Mul", [node("ReduceSum", [square("x", "x_sq", "mul"), "axes"], "sum_sq", keepdims=0),
                              "one_over_n"], "second")
        flat_var = node("Max", ["zero", node("Sub", [second, square(flat_mean, "mean_sq", "mul")], "diff")], "flat_var")
        kept = "kept_dynamic" if dynamic else "kept"
        var = node("Expand", [node("Reshape", [flat_var, kept], "var_r"), kept], "var")
        mean = node("Expand", [node("Reshape", [flat_mean, kept], "mean_r"), kept], "mean")
    std = node("Sqrt", [node("Add", [var, eps], "var_eps")], "std")
    if normalise == "keras":
        inv = node("Mul", [node("Reciprocal", [std], "inv0"), "gamma"], "inv")
        shift = node("Sub", ["beta", node("Mul", [mean, inv], "mean_inv")], "shift")
        out = node("Add", [node("Mul", ["x", inv], "x_inv"), shift], "normed")
    else:
        centered = centered or node("Sub", ["x", mean], "centered")
        if normalise == "reciprocal_gamma":
            inv = node("Mul", [node("Reciprocal", [std], "inv0"), "gamma"], "inv")
            out = node("Add", [node("Mul", [centered, inv], "scaled"), "beta"], "normed")
        else:
            if normalise == "div":
                out = node("Div", [centered, std], "normalized")
            elif normalise == "rsqrt":  # torch.rsqrt: Div(1, Sqrt(.))
                out = node("Mul", [centered, node("Div", ["one", std], "inv0")], "normalized")
            else:
                out = node("Mul", [centered, node("Reciprocal", [std], "inv0")], "normalized")
            if affine:
                out = node("Add", [node("Mul", [out, "gamma"], "scaled"), "beta"], "normed")
    node("MatMul", [out, "w"], "y")
    x_dims = [f"d{i}" for i in range(dynamic)] + list(shape[dynamic:])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)]
    if eps_input:
        inputs.append(helper.make_tensor_value_info("eps_in", TensorProto.FLOAT, []))
    used = {name for n in nodes for name in n.input}
    graph = helper.make_graph(nodes, "layernorm_form", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*x_dims[:-1], 8])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items() if k in used])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def offset_input(shape=SHAPE, mean: float = 100.0, spread: float = 0.5, seed: int = 0) -> np.ndarray:
    """Large mean, small spread: E[x^2] - E[x]^2 cancels badly in FP16 (x^2 ~ 1e4, spacing 8)."""
    return (mean + np.random.default_rng(seed).uniform(-spread, spread, shape)).astype(np.float32)


def reference_layernorm(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What every form computes, in float64: LayerNorm over the last axis, then the MatMul."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = x.astype(np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return (normed * values["gamma"] + values["beta"]) @ values["w"]


def unbiased_std_form(shape=SHAPE, folded: bool = False, opset: int = 17, eps_on_std: bool = True) -> onnx.ModelProto:
    """`a_2 * (x - mean) / (std + eps) + b_2` with `std = x.std(-1, keepdim=True)` (unbiased), then a MatMul.

    As torch's TorchScript exporter writes it (symbolic_helper._var_mean_helper, opset < 18): the
    user's `x.mean(-1)` and the std's own mean are two ReduceMeans of x; the std is
    `Sqrt(ReduceMean((x - m)^2) * N / (N - 1))` with N = ReduceProd(Gather(Shape(x), [-1])) cast to float
    (`folded`: N and N - 1 already constants, as sanitize's constant folding leaves them). eps is added to
    the std, not to the variance: this is not `LayerNormalization`. `eps_on_std=False`: `/ sqrt(var + eps)` with
    torch's unbiased `x.var(-1)` (eps inside the root, still not LayerNormalization's variance)."""
    width = shape[-1]
    rng = np.random.default_rng(5)
    consts = {"eps": np.array(1e-6, np.float32), "one": np.array(1.0, np.float32),
              "gamma": rng.uniform(0.5, 1.5, width).astype(np.float32),
              "beta": rng.uniform(-0.5, 0.5, width).astype(np.float32),
              "w": rng.normal(0, 0.2, (width, 8)).astype(np.float32),
              "last": np.array([-1], np.int64), "axes": np.array([-1], np.int64),
              "n": np.array(float(width), np.float32), "n_minus_1": np.array(width - 1.0, np.float32)}
    nodes = []

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=f"/ln/{op}_{len(nodes)}", **attrs))
        return output

    def reduce_mean(source, output):
        if opset >= 18:
            return node("ReduceMean", [source, "axes"], output, keepdims=1)
        return node("ReduceMean", [source], output, axes=[-1], keepdims=1)

    mean = reduce_mean("x", "mean")  # the user's x.mean(-1, keepdim=True)
    centred_for_std = node("Sub", ["x", reduce_mean("x", "std_mean")], "std_centred")
    variance = reduce_mean(node("Mul", [centred_for_std, centred_for_std], "std_sq"), "var")
    if folded:
        count, count_minus_1 = "n", "n_minus_1"
    else:
        dims = node("Gather", [node("Shape", ["x"], "x_shape"), "last"], "reduced_dims", axis=0)
        count = node("Cast", [node("ReduceProd", [dims], "count_int", keepdims=0)], "count", to=TensorProto.FLOAT)
        count_minus_1 = node("Sub", [count, "one"], "count_minus_1")
    unbiased = node("Div", [node("Mul", [variance, count], "var_n"), count_minus_1], "var_unbiased")
    if eps_on_std:
        denominator = node("Add", [node("Sqrt", [unbiased], "std"), "eps"], "std_eps")
    else:
        denominator = node("Sqrt", [node("Add", [unbiased, "eps"], "var_eps")], "std")
    scaled = node("Mul", ["gamma", node("Sub", ["x", mean], "centered")], "scaled")
    normed = node("Add", [node("Div", [scaled, denominator], "normalized"), "beta"], "normed")
    node("MatMul", [normed, "w"], "y")
    used = {name for n in nodes for name in n.input}
    graph = helper.make_graph(nodes, "unbiased_std_form", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], 8])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items() if k in used])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reference_unbiased_std(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What `unbiased_std_form` computes, in float64."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = x.astype(np.float64)
    normed = values["gamma"] * (x - x.mean(-1, keepdims=True)) / (x.std(-1, ddof=1, keepdims=True) + 1e-6)
    return (normed + values["beta"]) @ values["w"]
