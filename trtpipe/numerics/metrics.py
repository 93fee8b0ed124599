"""How far a candidate's output is from the reference's: the numbers, no verdict.

Definitions (all computed in float64 on the positions where the *reference*
is finite; a non-finite reference value is no target, so it is left out):

- `nonfinite`: candidate values that are inf/NaN where the reference is finite.
  Such a position counts as an infinite error in the metrics below, so a
  broken candidate can never look accurate on average.
- `max_abs`, `mean_abs`: max and mean of |candidate - reference|.
- `max_rel`: max of |candidate - reference| / max(|reference|, eps) with
  eps = REL_EPS_FRACTION * max|reference| (1e-2 of the output's own scale,
  floored at FP32's smallest normal). Without eps, a reference element that
  is 0 or 1e-9 turns a negligible absolute difference into a relative error
  of 1e6; relative to the scale of the whole output, such elements are judged
  by their absolute error instead. Why 1e-2 and not less: FP16 rounds at ~5e-4
  relative per op, so after a few ops its own noise is ~1e-3 of the scale; with
  a floor at 1e-3 that noise read as a 30-100% error on near-zero elements
  (measured on the transformer's tanh pooler), drowning the signal.
- `cosine`: cosine similarity of the flattened arrays; 1.0 when both are all
  zeros, 0.0 when only one is; NaN when the candidate has non-finite values
  (the similarity is undefined, and `nonfinite` already fails the output).
- `psnr`: only for 4-D outputs, which are taken to be NCHW images; None for
  everything else. 10*log10(peak^2 / mse) with peak = 1.0 when the reference
  lies in [0, 1] (the usual normalised image) and otherwise the reference's
  dynamic range (max - min; max|ref| if that is 0, 1.0 if both are 0).
  Identical outputs give +inf, a non-finite candidate -inf.
- An output with no position to judge (empty, or a reference without a
  finite value) has no error: 0, cosine 1.0, psnr +inf. Judging it as
  undefined failed every empty output (corpus: ReduceMax of an empty set,
  zero-size Split/Slice outputs) whatever the candidate did.

JSON: JSON has no inf or NaN, so `to_json` writes non-finite floats as the
strings "inf", "-inf" and "nan" and keeps None for "not applicable" (psnr of a
non-image). A string is visible in the report and cannot be mistaken for "no
value", which a `null` infinite error could.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

REL_EPS_FRACTION = 1e-2
REL_EPS_FLOOR = float(np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class OutputMetrics:
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    psnr: float | None
    nonfinite: int

    def to_json(self) -> dict:
        return {key: json_float(value) for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> "OutputMetrics":
        values = {f.name: (None if data[f.name] is None else float(data[f.name])) for f in fields(cls)}
        values["nonfinite"] = int(values["nonfinite"])
        return cls(**values)


def json_float(value):
    """A JSON-safe number: non-finite floats become "inf"/"-inf"/"nan"; ints and None unchanged."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def output_metrics(reference: np.ndarray, candidate: np.ndarray) -> OutputMetrics:
    """The metrics of the module docstring for one output; shapes must be equal."""
    reference = np.asarray(reference, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if reference.shape != candidate.shape:
        raise ValueError(
            f"shape {candidate.shape} of the candidate differs from the reference's {reference.shape}"
        )
    target = np.isfinite(reference)
    ref, cand = reference[target], candidate[target]
    broken = ~np.isfinite(cand)
    nonfinite = int(broken.sum())
    if ref.size == 0:  # nothing to judge (an empty tensor, or no finite reference value): no error
        return OutputMetrics(0.0, 0.0, 0.0, 1.0, math.inf if reference.ndim == 4 else None, nonfinite)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(cand - ref)
    error[broken] = np.inf
    scale = float(np.abs(ref).max())
    eps = max(REL_EPS_FRACTION * scale, REL_EPS_FLOOR)
    return OutputMetrics(
        max_abs=float(error.max()),
        mean_abs=float(error.mean()),
        max_rel=float((error / np.maximum(np.abs(ref), eps)).max()),
        cosine=float("nan") if nonfinite else cosine_similarity(ref, cand),
        psnr=psnr(ref, error) if reference.ndim == 4 else None,
        nonfinite=nonfinite,
    )


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 and norm_b == 0.0:
        return 1.0
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (norm_a * norm_b), -1.0, 1.0))


def image_peak(reference: np.ndarray) -> float:
    """1.0 for a [0, 1] image, else the reference's dynamic range (see module docstring)."""
    low, high = float(reference.min()), float(reference.max())
    if low >= 0.0 and high <= 1.0:
        return 1.0
    return (high - low) or float(np.abs(reference).max()) or 1.0


def psnr(reference: np.ndarray, error: np.ndarray) -> float:
    """PSNR in dB from the reference values and the absolute errors at the same positions."""
    mse = float(np.mean(np.square(error)))
    if mse == 0.0:
        return float("inf")
    if math.isinf(mse):
        return float("-inf")
    return 10.0 * math.log10(image_peak(reference) ** 2 / mse)


# Which way is worse, per metric: the aggregate over iterations keeps the worst.
HIGHER_IS_WORSE = {"max_abs": True, "mean_abs": True, "max_rel": True, "nonfinite": True,
                   "cosine": False, "psnr": False}


def worst_metrics(runs: list[OutputMetrics]) -> OutputMetrics:
    """Worst value of each metric across iterations; NaN (undefined) counts as the worst."""
    if not runs:
        raise ValueError("no iterations to aggregate")
    worst = {}
    for name, higher_is_worse in HIGHER_IS_WORSE.items():
        values = [getattr(run, name) for run in runs if getattr(run, name) is not None]
        if not values:
            worst[name] = None
        elif any(isinstance(v, float) and math.isnan(v) for v in values):
            worst[name] = float("nan")
        else:
            worst[name] = max(values) if higher_is_worse else min(values)
    return OutputMetrics(**worst)
