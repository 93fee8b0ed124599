"""How far a candidate's output is from the reference's: the numbers, no verdict.

Definitions (all computed in float64 on the positions where the *reference*
is finite; a non-finite reference value is no target, so it is left out):

- `ref_nonfinite`: positions where the reference itself is inf/NaN (left out
  of every metric); `ref_nonfinite_mismatch`: those of them where the
  candidate does not hold the same value (NaN for NaN, same-sign inf for inf).
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
- `abs_p99`, `rel_p99`: the 99th percentile of the elementwise absolute error
  and of the elementwise relative error of `max_rel` (same floored
  denominator), linear interpolation between order statistics (numpy's
  default method). After Polygraphy's `--check-error-stat quantile` with its
  default `--error-quantile 0.99` (Polygraphy 0.53; it also offers max, mean,
  median and elemwise): "all but the worst 1% of the elements are within".
  The quantile is fixed at 0.99 so the JSON key says what it is. Unlike
  Polygraphy's relative error (denominator |ref|, 2.2e-16 only where it is
  exactly 0), ours keeps the 1e-2 x scale floor: without it, on a zero-mean
  or probability output more than 1% of the elements are near zero and the
  p99 would measure their noise, not the output's accuracy. rel_p99 <= max_rel.
  A non-finite candidate value is an infinite error here too, so p99 is inf
  once about 1% of the elements (those the interpolation reaches) are.
- `rel_l2`: ||candidate - reference||_2 / ||reference||_2, the RMS error
  relative to the output's RMS value, one number per output that no single near-zero
  element can dominate (a scale-free measure of the whole output, like cosine,
  but unlike cosine it sees a wrong scale: 1.1 x reference has cosine 1.0 and
  rel_l2 0.1). All-zero reference: 0.0 when the candidate is all zero too,
  else 1.0 (the candidate is then nothing but error, ||c - 0|| / ||c||), a
  finite "100% off" instead of a division by zero. Polygraphy's L2 compare
  is the absolute norm (unit-dependent); its SNR compare is this measure in
  decibels, SNR = -20 log10(rel_l2) (rel_l2 1e-2 is 40 dB).
- `cosine`: cosine similarity of the flattened arrays; 1.0 when both are all
  zeros, 0.0 when only one is; NaN when the candidate has non-finite values
  (the similarity is undefined, and `nonfinite` already fails the output).
- `psnr`: only for 4-D outputs, which are taken to be NCHW images; None for
  everything else. 10*log10(peak^2 / mse) with peak = 1.0 when the reference
  lies in [0, 1] (the usual normalised image) and otherwise the reference's
  dynamic range (max - min; max|ref| if that is 0, 1.0 if both are 0).
  Identical outputs give +inf, a non-finite candidate -inf.
- `pixels_off_8bit`: only for 4-D (image) outputs, None otherwise. The share of
  elements whose 8-bit value moves by more than one level when both outputs are
  quantised as the image would be saved: level = round(255 * (x - low) / peak),
  clipped to [0, 255], with low = 0 and peak = 1 for a [0, 1] reference and
  otherwise low = min(ref) and peak = `image_peak` (the reference's dynamic
  range). Why more than one level: two correct implementations round a value
  that sits near a level boundary to neighbouring levels, so a one-level move is
  what any faithful recomputation gives (FP16 RMS error of 0.4 level moves about
  a third of the pixels by one); a move of two levels or more is a change the
  output's users could see. A non-finite candidate value counts as moved.
- `argmax_agree`: the share of positions whose arg-max over the class axis is
  the same in the candidate as in the reference (a classifier's decision, a
  segmentation map's label). The class axis is axis 1 of a 4-D (NCHW) output
  and the last axis otherwise; None when that axis has fewer than 2 elements
  (a one-channel mask, a scalar) or the output has more than 4 dims. A position
  where the candidate picks a class the reference ties for its maximum agrees; one
  where the candidate holds a NaN disagrees.
  Reported for every output that has a class axis, also where it means nothing
  (hidden states): only a bound the user sets on a probability or logit output
  (`argmax_agree_min`) judges it.
- An output with no position to judge (empty, or a reference without a
  finite value) has no error: 0 (every error measure), cosine 1.0, psnr +inf. Judging it as
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
PERCENTILE = 0.99  # of abs_p99 / rel_p99 (Polygraphy's default --error-quantile)


@dataclass(frozen=True)
class OutputMetrics:
    max_abs: float
    mean_abs: float
    max_rel: float
    abs_p99: float
    rel_p99: float
    rel_l2: float
    cosine: float
    psnr: float | None
    nonfinite: int
    # Positions where the reference itself is inf/NaN (left out of every metric above), and
    # those of them where the candidate does not hold the same value (NaN for NaN, an inf of
    # the same sign for an inf): the first is reported, the second fails (validate/compare.py).
    ref_nonfinite: int = 0
    ref_nonfinite_mismatch: int = 0
    # The users' criteria (module docstring): None where not applicable, and in reports
    # written before they existed.
    pixels_off_8bit: float | None = None
    argmax_agree: float | None = None

    def to_json(self) -> dict:
        return {key: json_float(value) for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> "OutputMetrics":
        # Reports older than the reference counts lack them: their defaults (0) stand.
        values = {f.name: (None if data[f.name] is None else float(data[f.name])) for f in fields(cls)
                  if f.name in data or f.name not in (*COUNTS, *OPTIONAL)}
        for name in COUNTS:
            if name in values:
                values[name] = int(values[name])
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
    counts = _reference_nonfinite(reference[~target], candidate[~target])
    if ref.size == 0:  # nothing to judge (an empty tensor, or no finite reference value): no error
        return OutputMetrics(max_abs=0.0, mean_abs=0.0, max_rel=0.0, abs_p99=0.0, rel_p99=0.0, rel_l2=0.0,
                             cosine=1.0, psnr=math.inf if reference.ndim == 4 else None, nonfinite=nonfinite,
                             **counts, pixels_off_8bit=0.0 if reference.ndim == 4 else None,
                             argmax_agree=None if class_axis(reference) is None else 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(cand - ref)
    error[broken] = np.inf
    scale = float(np.abs(ref).max())
    eps = max(REL_EPS_FRACTION * scale, REL_EPS_FLOOR)
    relative = error / np.maximum(np.abs(ref), eps)
    return OutputMetrics(
        max_abs=float(error.max()),
        mean_abs=float(error.mean()),
        max_rel=float(relative.max()),
        abs_p99=percentile(error, PERCENTILE),
        rel_p99=percentile(relative, PERCENTILE),
        rel_l2=relative_l2(ref, error),
        cosine=float("nan") if nonfinite else cosine_similarity(ref, cand),
        psnr=psnr(ref, error) if reference.ndim == 4 else None,
        nonfinite=nonfinite,
        **counts,
        pixels_off_8bit=pixels_off_8bit(ref, cand) if reference.ndim == 4 else None,
        argmax_agree=argmax_agreement(reference, candidate),
    )


def _reference_nonfinite(ref: np.ndarray, cand: np.ndarray) -> dict:
    """The counts of positions where the reference is non-finite, and of those the candidate differs at."""
    same = (np.isnan(ref) & np.isnan(cand)) | (np.isinf(ref) & (cand == ref))
    return {"ref_nonfinite": int(ref.size), "ref_nonfinite_mismatch": int(ref.size - same.sum())}


def percentile(values: np.ndarray, q: float) -> float:
    """The q-quantile of non-negative errors, numpy's linear method, with +inf as an ordinary
    (largest) value: np.quantile gives NaN (inf - inf, or inf * 0) where it meets one."""
    values = np.ravel(values)
    position = q * (values.size - 1)
    low, high = math.floor(position), math.ceil(position)
    ordered = np.partition(values, [low, high])
    below, above = float(ordered[low]), float(ordered[high])
    fraction = position - low
    if fraction == 0.0 or below == above:
        return below
    if math.isinf(above):
        return math.inf
    return below + (above - below) * fraction


def relative_l2(reference: np.ndarray, error: np.ndarray) -> float:
    """||error||_2 / ||reference||_2; all-zero reference: 0.0 or 1.0 (see module docstring)."""
    error_norm = float(np.linalg.norm(error))  # inf when any error is inf
    reference_norm = float(np.linalg.norm(reference))
    if reference_norm > 0.0:
        return error_norm / reference_norm
    return 0.0 if error_norm == 0.0 else 1.0


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


def pixels_off_8bit(reference: np.ndarray, candidate: np.ndarray) -> float:
    """The share of elements whose 8-bit level moves by more than one (module docstring);
    `reference` finite, `candidate` at the same positions."""
    peak = image_peak(reference)
    low = 0.0 if reference.min() >= 0.0 and reference.max() <= 1.0 else float(reference.min())

    def levels(values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.clip(np.rint(255.0 * (values - low) / peak), 0.0, 255.0)

    moved = ~(np.abs(levels(candidate) - levels(reference)) <= 1.0) | ~np.isfinite(candidate)
    return float(moved.mean())


def class_axis(reference: np.ndarray) -> int | None:
    """The axis `argmax_agree` takes the arg-max over: 1 of NCHW, else the last; None without one."""
    if reference.ndim == 0 or reference.ndim > 4:
        return None
    axis = 1 if reference.ndim == 4 else reference.ndim - 1
    return axis if reference.shape[axis] >= 2 and reference.size else None


def argmax_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """The share of positions whose arg-max over the class axis agrees (module docstring).
    Infinities are ordinary values (+inf is a maximum); NaN is the lowest value; a position
    where the reference is NaN throughout is left out, one where the candidate holds a NaN
    disagrees (its decision is undefined)."""
    axis = class_axis(reference)
    if axis is None:
        return None
    ref = np.moveaxis(reference, axis, -1).reshape(-1, reference.shape[axis])
    cand = np.moveaxis(candidate, axis, -1).reshape(-1, reference.shape[axis])
    judged = ~np.isnan(ref).all(axis=1)
    if not judged.any():
        return 1.0
    ref, cand = np.nan_to_num(ref[judged], nan=-np.inf, posinf=np.inf, neginf=-np.inf), cand[judged]
    picked = np.argmax(np.nan_to_num(cand, nan=-np.inf, posinf=np.inf, neginf=-np.inf), axis=1)
    agree = (ref[np.arange(len(ref)), picked] == ref.max(axis=1)) & ~np.isnan(cand).any(axis=1)
    return float(agree.mean())


# Which way is worse, per metric: the aggregate over iterations keeps the worst.
HIGHER_IS_WORSE = {"max_abs": True, "mean_abs": True, "max_rel": True, "abs_p99": True, "rel_p99": True,
                   "rel_l2": True, "cosine": False, "psnr": False, "nonfinite": True,
                   "ref_nonfinite": True, "ref_nonfinite_mismatch": True,
                   "pixels_off_8bit": True, "argmax_agree": False}
COUNTS = ("nonfinite", "ref_nonfinite", "ref_nonfinite_mismatch")
OPTIONAL = ("pixels_off_8bit", "argmax_agree")  # absent from older reports: None


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
