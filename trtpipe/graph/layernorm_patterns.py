"""The decomposed LayerNorm forms the fusion rule (`layernorm_rule`) recognises.

Each pattern is the same math, `(x - E[x]) / sqrt(Var[x] + eps) [* gamma + beta]`,
written the way one exporter writes it; a pattern is one variance form, one way
of applying 1/std, with or without the affine part:

| variance            | math                 | exporters                                       |
|---------------------|----------------------|-------------------------------------------------|
| `centred_pow`       | E[(x - E[x])^2], Pow | torch (opset 13-17), Paddle2ONNX                |
| `centred_mul`       | E[(x - E[x])^2], Mul | tf2onnx (Keras `moments`: SquaredDifference)    |
| `moments_mul/pow`   | E[x^2] - E[x]^2      | jax2tf/flax, hand-written                        |

| normalise           | math                                      | exporters          |
|---------------------|-------------------------------------------|--------------------|
| `div`               | (x - E[x]) / std                          | torch              |
| `reciprocal`        | (x - E[x]) * Reciprocal(std)              | tf2onnx (Rsqrt)    |
| `rsqrt`             | (x - E[x]) * Div(1, std)                  | torch (`torch.rsqrt`) |
| `reciprocal_gamma`  | (x - E[x]) * (Reciprocal(std) * gamma)    | tf2onnx, jax2tf    |
| `keras`             | x * inv + (beta - E[x] * inv), inv = Reciprocal(std) * gamma | tf2onnx (`tf.nn.batch_normalization`) |

Labels the rule relies on: `mean` (E[x], the anchor in reports), every
`ReduceMean` (its axes are checked), `eps`/`gamma`/`beta` parameters.
Decision: affine patterns come first, so a LayerNorm with gamma/beta is fused
whole rather than as its normalisation followed by a stray Mul/Add.
Decision: E[x^2] - E[x]^2 fused into `LayerNormalization` is the same math
computed without the cancellation (more accurate in FP32 too, never less).
jax2tf's keepdims=0 `ReduceSum * (1/N)` with `Reshape`/`Expand` back is not
fused (proving the reshape restores the keepdims shape needs static shapes);
precision/layernorm_groups.py keeps it FP32 as a group instead.
"""

from __future__ import annotations

from trtpipe.graph.pattern import Pattern


def _centred_pow(op, x):
    mean = op.ReduceMean(x, _label="mean")
    centered = op.Sub(x, mean, _label="center")
    return mean, centered, op.ReduceMean(op.Pow(centered, 2.0, _label="square"), _label="variance")


def _centred_mul(op, x):
    mean = op.ReduceMean(x, _label="mean")
    centered = op.Sub(x, mean, _label="center")
    return mean, centered, op.ReduceMean(op.Mul(centered, centered, _label="square"), _label="variance")


def _moments(square: str):
    def variance(op, x):
        mean = op.ReduceMean(x, _label="mean")
        if square == "Pow":
            x_squared, mean_squared = op.Pow(x, 2.0, _label="square"), op.Pow(mean, 2.0, _label="square_mean")
        else:
            x_squared, mean_squared = op.Mul(x, x, _label="square"), op.Mul(mean, mean, _label="square_mean")
        second_moment = op.ReduceMean(x_squared, _label="second_moment")
        return mean, None, op.Sub(second_moment, mean_squared, _label="variance")

    return variance


VARIANCES = {"centred_pow": _centred_pow, "centred_mul": _centred_mul,
             "moments_mul": _moments("Mul"), "moments_pow": _moments("Pow")}


def _std(op, variance, eps):
    return op.Sqrt(op.Add(variance, eps, _label="add_epsilon"), _label="std")


def _make(variance_name: str, normalise: str, affine: bool):
    variance_form = VARIANCES[variance_name]

    def layernorm(op, x, eps, gamma, beta):
        mean, centered, variance = variance_form(op, x)
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


AFFINE_ONLY = ("reciprocal_gamma", "keras")
PATTERNS = tuple(
    _make(variance, normalise, affine)
    for affine in (True, False)
    for variance in VARIANCES
    for normalise in ("div", "reciprocal", "rsqrt", *AFFINE_ONLY)
    if affine or normalise not in AFFINE_ONLY
)
