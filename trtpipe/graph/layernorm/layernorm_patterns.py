"""The decomposed LayerNorm forms the fusion rule (`layernorm_rule`) recognises.

Each pattern is the same math, `(x - E[x]) / sqrt(Var[x] + eps) [* gamma + beta]`,
written the way one exporter writes it; a pattern is one variance form, one way
of applying 1/std, with or without the affine part:

| variance            | math                 | exporters                                       |
|---------------------|----------------------|-------------------------------------------------|
| `centred_pow`       | E[(x - E[x])^2], Pow | torch (opset 13-17), Paddle2ONNX                |
| `centred_mul`       | E[(x - E[x])^2], Mul | tf2onnx (Keras `moments`: SquaredDifference)    |
| `moments_mul/pow`   | E[x^2] - E[x]^2      | hand-written (torch `x.pow(2).mean() - mean**2`)  |
| `jax2tf`            | E[x^2] - E[x]^2 as `ReduceSum` keepdims=0 * 1/N, `Max(0, .)`, `Reshape`+`Expand` back | jax2tf/flax (magika) |

| normalise           | math                                      | exporters          |
|---------------------|-------------------------------------------|--------------------|
| `div`               | (x - E[x]) / std                          | torch              |
| `reciprocal`        | (x - E[x]) * Reciprocal(std)              | tf2onnx (Rsqrt)    |
| `rsqrt`             | (x - E[x]) * Div(1, std)                  | torch (`torch.rsqrt`) |
| `reciprocal_gamma`  | (x - E[x]) * (Reciprocal(std) * gamma)    | tf2onnx, jax2tf    |
| `keras`             | x * inv + (beta - E[x] * inv), inv = Reciprocal(std) * gamma | tf2onnx (`tf.nn.batch_normalization`) |

| whole normalisation | math                                      | exporters          |
|---------------------|-------------------------------------------|--------------------|
| `instance_norm`     | InstanceNormalization(x, 1, 0) * gamma + beta | tf2onnx (its layer_normalization rewriter) |

tf2onnx rewrites the TF LayerNorm subgraph (`Mean`, `Sub`, `Square`, `Mean`, `Add(eps)`, `Rsqrt`, scale
and bias `Mul`/`Add`) of a rank-3 tensor [B, T, C] normalised over its last axis into
`InstanceNormalization(x, ones, zeros, epsilon)` followed by `Mul(gamma)`, `Add(beta)`; the scale and
bias of ones and zeros are `ConstantOfShape(Slice(Shape(x), 1:2))` (folded into initializers by
sanitize when that dim is static). InstanceNormalization normalises each [b, t] over the axes
[2, rank): the last axis of a rank-3 tensor, so with a scale of exactly 1 and a bias of exactly 0 it is
`LayerNormalization` over those axes, epsilon carried over from its attribute (the rule checks both).

Every E[.] written as `ReduceMean` may also be a `GlobalAveragePool` (`MEAN_OPS`): tf2onnx's
GlobalPoolOptimizer (tf2onnx/optimizer/global_pool_optimizer.py) turns each float ReduceMean whose
`axes` attribute is exactly [2, rank) into a GlobalAveragePool (keepdims=1; keepdims=0 adds a Squeeze,
which no LayerNorm form has), so a Keras LayerNormalization of a [B, T, C] tensor (axes [2]) exports
with both of its means as GlobalAveragePool at opset < 18 (at 18 the axes are an input and the
optimizer leaves the ReduceMean). It averages over [2, rank): trailing axes, kept, like the
ReduceMean it replaced; the rule (layernorm_rule) reads its axes from x's rank.

Labels the rule relies on: `mean` (E[x], the anchor in reports; the
InstanceNormalization itself in `instance_norm`), every
`ReduceMean`/`ReduceSum`/`InstanceNormalization` (its axes are checked), `eps`/`gamma`/`beta`
parameters (`instance_norm`: `ones`/`zeros`, its epsilon an attribute), and for jax2tf `inv_n`/`inv_n_2` (must be 1/N) and `RESTORED`
(must give x's shape with 1 on the reduced axes).
Decision: affine patterns come first, so a LayerNorm with gamma/beta is fused
whole rather than as its normalisation followed by a stray Mul/Add.
Decision: E[x^2] - E[x]^2 fused into `LayerNormalization` is the same math
computed without the cancellation (more accurate in FP32 too, never less).
The `Max(0, .)` of jax2tf's form only clamps a variance that cancellation made
negative, which `LayerNormalization` never computes.
"""

from __future__ import annotations

from trtpipe.graph.layernorm.pattern import Pattern

MEAN_OPS = ("GlobalAveragePool",)  # alternatives to ReduceMean for E[.] (tf2onnx's GlobalPoolOptimizer)


def _centred_pow(op, x, v):
    mean = op.ReduceMean(x, _label="mean", _or=MEAN_OPS)
    centered = op.Sub(x, mean, _label="center")
    return mean, centered, op.ReduceMean(op.Pow(centered, 2.0, _label="square"), _label="variance", _or=MEAN_OPS)


def _centred_mul(op, x, v):
    mean = op.ReduceMean(x, _label="mean", _or=MEAN_OPS)
    centered = op.Sub(x, mean, _label="center")
    return mean, centered, op.ReduceMean(op.Mul(centered, centered, _label="square"), _label="variance", _or=MEAN_OPS)


def _moments(square: str):
    def variance(op, x, v):
        mean = op.ReduceMean(x, _label="mean", _or=MEAN_OPS)
        if square == "Pow":
            x_squared, mean_squared = op.Pow(x, 2.0, _label="square"), op.Pow(mean, 2.0, _label="square_mean")
        else:
            x_squared, mean_squared = op.Mul(x, x, _label="square"), op.Mul(mean, mean, _label="square_mean")
        second_moment = op.ReduceMean(x_squared, _label="second_moment", _or=MEAN_OPS)
        return mean, None, op.Sub(second_moment, mean_squared, _label="variance")

    return variance


def _jax2tf(op, x, v):
    """E[x^2] - E[x]^2 with keepdims=0 sums times 1/N, Max(0, .), Reshape + Expand back (magika)."""
    flat_mean = op.Mul(op.ReduceSum(x, _label="sum"), v["inv_n"], _label="flat_mean")
    second = op.Mul(op.ReduceSum(op.Mul(x, x, _label="square"), _label="sum_square"), v["inv_n_2"],
                    _label="second_moment")
    difference = op.Sub(second, op.Mul(flat_mean, flat_mean, _label="square_mean"), _label="difference")
    clamped = op.Max(0.0, difference, _label="clamp")
    variance = op.Expand(op.Reshape(clamped, v["variance_shape"], _label="reshape_variance"),
                         v["variance_broadcast"], _label="variance")
    mean = op.Expand(op.Reshape(flat_mean, v["mean_shape"], _label="reshape_mean"), v["mean_broadcast"],
                     _label="mean")
    return mean, None, variance


VARIANCES = {"centred_pow": _centred_pow, "centred_mul": _centred_mul,
             "moments_mul": _moments("Mul"), "moments_pow": _moments("Pow"), "jax2tf": _jax2tf}
RESTORED = ("reshape_mean", "mean", "reshape_variance", "variance")  # jax2tf: must give the keepdims shape


def _std(op, variance, eps):
    return op.Sqrt(op.Add(variance, eps, _label="add_epsilon"), _label="std")


def _make(variance_name: str, normalise: str, affine: bool):
    variance_form = VARIANCES[variance_name]

    def layernorm(op, x, eps, gamma, beta, inv_n, inv_n_2, mean_shape, mean_broadcast, variance_shape,
                  variance_broadcast):
        extra = {"inv_n": inv_n, "inv_n_2": inv_n_2, "mean_shape": mean_shape, "mean_broadcast": mean_broadcast,
                 "variance_shape": variance_shape, "variance_broadcast": variance_broadcast}
        mean, centered, variance = variance_form(op, x, extra)
        std = _std(op, variance, eps)
        if normalise == "keras":
            inv = op.Mul(op.Reciprocal(std, _label="inverse"), gamma, _label="scale")
            shift = op.Sub(beta, op.Mul(mean, inv, _label="scale_mean"), _label="shift_mean")
            return op.Add(op.Mul(x, inv, _label="normalize"), shift, _label="shift")
        centered = centered or op.Sub(x, mean, _label="center")
        if normalise == "reciprocal_gamma":
            inv = op.Mul(op.Reciprocal(std, _label="inverse"), gamma, _label="scale")
            return op.Add(op.Mul(centered, inv, _label="normalize"), beta, _label="shift")
        if normalise == "div":
            normalized = op.Div(centered, std, _label="normalize")
        elif normalise == "rsqrt":
            normalized = op.Mul(centered, op.Div(1.0, std, _label="inverse"), _label="normalize")
        else:
            normalized = op.Mul(centered, op.Reciprocal(std, _label="inverse"), _label="normalize")
        if not affine:
            return normalized
        return op.Add(op.Mul(normalized, gamma, _label="scale"), beta, _label="shift")

    layernorm.__name__ = f"{variance_name}_{normalise}" + ("_affine" if affine else "")
    return Pattern.trace(layernorm)


def instance_norm(op, x, ones, zeros, gamma, beta):
    """tf2onnx's rewrite (see the module docstring): a whole normalisation in one node, then gamma and beta."""
    normalized = op.InstanceNormalization(x, ones, zeros, _label="mean")
    return op.Add(op.Mul(normalized, gamma, _label="scale"), beta, _label="shift")


AFFINE_ONLY = ("reciprocal_gamma", "keras")
PATTERNS = tuple(
    _make(variance, normalise, affine)
    for affine in (True, False)
    for variance in VARIANCES
    for normalise in ("div", "reciprocal", "rsqrt", *AFFINE_ONLY)
    if affine or normalise not in AFFINE_ONLY
) + (Pattern.trace(instance_norm),)
