"""The comparator: judges runner results against tolerances. It runs nothing itself.

Decisions:
- A tolerance bounds a metric only when it is set; unset (None) means "not
  judged". Non-finite candidate values (where the reference is finite) always
  fail, whatever the tolerances say: no tolerance makes NaN accurate.
- `DEFAULT_TOLERANCE`, for a model family we know nothing about, sets only
  scale-free bounds on the whole output: `cosine_min=0.999`, `rel_l2=0.044`
  and `psnr_min=40` dB (4-D image outputs only). None of them is elementwise,
  so a probability or zero-mean output whose near-zero elements carry a large
  *relative* error that is negligible against the output is not rejected
  (elementwise `max_rel`, as the transformer recipe used it, did). Why these values: cosine 0.999 is
  an angle of 2.6 degrees; it is blind to an error along the reference (a
  wrong scale: 1.05 x ref has cosine 1.0), so `rel_l2` bounds the error norm
  in every direction at the norm the cosine bound already allows for an error
  orthogonal to the reference: rel_l2 = sqrt(1/cosine^2 - 1) = 0.0448 at
  0.999, rounded down to 0.044. The rule rel_l2 = sqrt(1/cosine_min^2 - 1)
  (`rel_l2_for_cosine`) gives the recipes' values too. 40 dB for an image is
  an RMS error of 1% of its peak. `max_abs`/`abs_p99` depend on an output's
  units, `max_rel`/`rel_p99` are elementwise: they are for per-output
  overrides where the user knows the output.
- A per-output override replaces the default field by field, only where it
  sets a value: `{"logits": Tolerance(max_abs=0.05)}` keeps the default
  cosine and psnr bounds. To loosen a default bound, set a permissive value
  (`cosine_min=-1`).
- A metric that is NaN (undefined) fails any bound set on it (when the NaN
  comes from non-finite candidate values, only those are reported); `psnr_min` on
  a non-image output (psnr None) is not applicable and is skipped, and so are
  `pixels_off_8bit` on a non-image and `argmax_agree_min` on an output without a
  class axis: a recipe states its criterion for the kinds of output it names
  and each output is judged by the bounds that apply to its kind.
- Several iterations are aggregated per metric to the worst value across
  iterations (`worst_metrics`), then judged once: one bad input is enough to
  fail, and the report shows how bad the worst case was.
- Positions where the *reference* is inf/NaN are no target for any metric,
  but never passed silently: their count (`ref_nonfinite`) is in
  validation.json and a note in the console. There the candidate must hold
  the same value (NaN for NaN, an inf of the same sign): such an output
  passes (a masked attention score of -inf, a log of 0, are what the model
  computes, and failing them would fail correct candidates), with the note;
  any other value there (`ref_nonfinite_mismatch`) always fails.
- Leaving positions out must not make a pass vacuous: an output whose reference is finite
  at fewer than `min_compared` of its positions (the worst iteration), or which is empty,
  fails and says how many were compared (validate.min_compared, 0.5 by default; issue 22
  item 5: all-NaN and empty sample data passed with nothing compared).
- A missing output or a shape that differs from the reference fails the
  output with that reason instead of raising: the report stays complete.
- A sequence output is compared as its elements' values in order (its shape
  is the list of their shapes); string outputs must be equal and have no
  metrics (found by the corpus run: `SplitToSequence` crashed the comparison).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np

from trtpipe.errors import UserError
from trtpipe.numerics.metrics import OutputMetrics, output_metrics, worst_metrics


@dataclass(frozen=True)
class Tolerance:
    # Upper bounds carry the name of the metric they bound; lower bounds end in `_min`.
    max_abs: float | None = None
    max_rel: float | None = None
    abs_p99: float | None = None
    rel_p99: float | None = None
    rel_l2: float | None = None
    cosine_min: float | None = None
    psnr_min: float | None = None
    # The users' criteria (metrics.py): share of image elements more than one 8-bit level off
    # (upper bound), share of positions whose arg-max class agrees (lower bound).
    pixels_off_8bit: float | None = None
    argmax_agree_min: float | None = None

    def overridden_by(self, override: "Tolerance") -> "Tolerance":
        """This tolerance with every bound `override` sets replaced."""
        values = {f.name: getattr(override, f.name) for f in fields(override)}
        return replace(self, **{name: value for name, value in values.items() if value is not None})

    @classmethod
    def from_mapping(cls, values: Mapping, where: str = "the default tolerance") -> "Tolerance":
        """From config; an unknown key is a user error naming the valid ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"unknown tolerance key(s) {unknown} in {where}", f"use one of {sorted(known)}")
        return cls(**{key: None if value is None else float(value) for key, value in values.items()})


def rel_l2_for_cosine(cosine_min: float) -> float:
    """The relative error norm of an error orthogonal to the reference at cosine `cosine_min`."""
    return math.sqrt(1.0 / cosine_min**2 - 1.0)


DEFAULT_TOLERANCE = Tolerance(cosine_min=0.999, rel_l2=0.044, psnr_min=40.0)


@dataclass(frozen=True)
class Tolerances:
    """The default tolerance and per-output overrides (keyed by output name)."""

    default: Tolerance = DEFAULT_TOLERANCE
    per_output: Mapping[str, Tolerance] = field(default_factory=dict)

    def for_output(self, name: str) -> Tolerance:
        return self.default.overridden_by(self.per_output.get(name, Tolerance()))

    @classmethod
    def from_mapping(cls, default: Mapping | None = None, per_output: Mapping | None = None) -> "Tolerances":
        """From config: `default` overrides DEFAULT_TOLERANCE field by field; `per_output`
        maps an output name to its own overrides."""
        base = DEFAULT_TOLERANCE.overridden_by(Tolerance.from_mapping(default or {}))
        overrides = {
            output: Tolerance.from_mapping(values, f"the tolerance of output {output!r}")
            for output, values in (per_output or {}).items()
        }
        return cls(base, overrides)


# (metric, tolerance field, True when the metric must stay at or below the bound)
BOUNDS = (
    ("max_abs", "max_abs", True),
    ("max_rel", "max_rel", True),
    ("abs_p99", "abs_p99", True),
    ("rel_p99", "rel_p99", True),
    ("rel_l2", "rel_l2", True),
    ("cosine", "cosine_min", False),
    ("psnr", "psnr_min", False),
    ("pixels_off_8bit", "pixels_off_8bit", True),
    ("argmax_agree", "argmax_agree_min", False),
)


def judge(metrics: OutputMetrics, tolerance: Tolerance) -> tuple[bool, list[str]]:
    """(passed, reasons): each reason names the failing metric, its value and the bound."""
    reasons = []
    if metrics.nonfinite:
        reasons.append(
            f"nonfinite {metrics.nonfinite}: candidate values are inf/NaN where the reference is "
            "finite (always a failure)"
        )
    if metrics.ref_nonfinite_mismatch:
        reasons.append(
            f"ref_nonfinite_mismatch {metrics.ref_nonfinite_mismatch}: the reference is inf/NaN at "
            f"{metrics.ref_nonfinite} positions and the candidate holds another value at these "
            "(always a failure)"
        )
    for metric, bound_name, upper in BOUNDS:
        bound, value = getattr(tolerance, bound_name), getattr(metrics, metric)
        if bound is None or value is None:
            continue
        if math.isnan(value) and metrics.nonfinite:
            continue  # undefined because of the non-finite values already reported
        if math.isnan(value):
            reasons.append(f"{metric} is NaN (undefined), {bound_name} is {bound:g}")
        elif upper and value > bound:
            reasons.append(f"{metric} {value:.6g} exceeds {bound_name} {bound:g}")
        elif not upper and value < bound:
            reasons.append(f"{metric} {value:.6g} is below {bound_name} {bound:g}")
    return not reasons, reasons


@dataclass
class OutputVerdict:
    metrics: OutputMetrics | None  # None when the output could not be compared at all
    passed: bool
    reasons: list[str]


@dataclass
class CandidateVerdict:
    name: str
    passed: bool
    outputs: dict[str, OutputVerdict]
    iterations: int
    # Under the anchored criterion of a quantized model (anchored.py): the candidate against the anchor,
    # with its widened bounds; None otherwise, and then the report is as it always was.
    anchored: object | None = None

    @property
    def reasons(self) -> list[str]:
        return [
            f"{output}: {reason}" for output, verdict in self.outputs.items() for reason in verdict.reasons
        ]

    def to_json(self) -> dict:
        """The `validation.json` candidate entry (metrics per output), plus the failing reasons, and
        under the anchored criterion the candidate against the anchor (`anchored`)."""
        entry = {
            "name": self.name,
            "passed": self.passed,
            "outputs": {
                output: verdict.metrics.to_json() if verdict.metrics else None
                for output, verdict in self.outputs.items()
            },
            "reasons": self.reasons,
            "iterations": self.iterations,
        }
        if self.anchored is not None:
            against = self.anchored.verdict
            plain = self.anchored.plain
            metrics = {output: verdict.metrics.to_json() if verdict.metrics else None
                       for output, verdict in against.outputs.items()}
            entry["anchored"] = {"passed": against.passed, "outputs": metrics, "reasons": against.reasons,
                                 "failed_against_reference": [o for o, v in plain.outputs.items() if not v.passed]}
        return entry


def compare_candidate(
    name: str,
    reference_runs: list[Mapping[str, np.ndarray]],
    candidate_runs: list[Mapping[str, np.ndarray]],
    outputs: list[str],
    tolerances: Tolerances = Tolerances(),
    min_compared: float = 0.0,
) -> CandidateVerdict:
    """Judge one candidate: iteration i of the candidate against iteration i of the reference.
    `min_compared`: the share of each output's positions that must be compared (0: no bound)."""
    if len(reference_runs) != len(candidate_runs) or not reference_runs:
        raise ValueError(f"{len(reference_runs)} reference runs but {len(candidate_runs)} candidate runs")
    verdicts = {}
    for output in outputs:
        tolerance = tolerances.for_output(output)
        verdicts[output] = _output_verdict(output, reference_runs, candidate_runs, tolerance, min_compared)
    passed = all(verdict.passed for verdict in verdicts.values())
    return CandidateVerdict(name, passed, verdicts, len(reference_runs))


def _output_verdict(output, reference_runs, candidate_runs, tolerance: Tolerance,
                    min_compared: float = 0.0) -> OutputVerdict:
    per_iteration, fewest = [], None  # fewest: (share, compared, positions, iteration) of the worst iteration
    for index, (reference, candidate) in enumerate(zip(reference_runs, candidate_runs)):
        if output not in candidate:
            return OutputVerdict(None, False, [f"the candidate has no output {output!r}"])
        if output not in reference:
            return OutputVerdict(None, False, [f"the reference model computes no tensor {output!r} to compare it with"])
        (ref, ref_shape), (cand, cand_shape) = _comparable(reference[output]), _comparable(candidate[output])
        if ref_shape != cand_shape:
            reason = f"shape {cand_shape} differs from the reference's {ref_shape}"
            return OutputVerdict(None, False, [f"{reason} (iteration {index})"])
        if ref.dtype.kind in "OSU":  # strings: equal or not, no metric applies
            if not np.array_equal(ref, cand):
                return OutputVerdict(None, False, [f"string values differ (iteration {index})"])
            continue
        if ref.size == 0:
            if min_compared > 0:
                return OutputVerdict(None, False, [f"nothing to compare: the output is empty, shape {ref_shape} "
                                                   f"(iteration {index}; validate.min_compared {min_compared:g})"])
            continue
        metrics_i = output_metrics(ref, cand)
        per_iteration.append(metrics_i)
        compared = int(ref.size - metrics_i.ref_nonfinite)
        if fewest is None or compared / ref.size < fewest[0]:
            fewest = (compared / ref.size, compared, int(ref.size), index)
    if not per_iteration:
        return OutputVerdict(None, True, [])
    metrics = worst_metrics(per_iteration)
    passed, reasons = judge(metrics, tolerance)
    if fewest is not None and fewest[0] < min_compared:
        share, compared, positions, index = fewest
        reasons.append(f"only {compared} of {positions} positions compared ({share:.0%}, iteration {index}): the "
                       f"reference is inf/NaN at the rest; validate.min_compared is {min_compared:g}")
        passed = False
    return OutputVerdict(metrics, passed, reasons)


def _comparable(value) -> tuple[np.ndarray, list]:
    """(values, shape): a tensor as it is; a sequence output (a list of tensors) as its
    elements' values in order, with the list of their shapes as its shape."""
    if isinstance(value, list):
        arrays = [np.asarray(element) for element in value]
        flat = np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0, np.float32)
        return flat, [list(a.shape) for a in arrays]
    array = np.asarray(value)
    return array, list(array.shape)


def reference_nonfinite_notes(verdict: CandidateVerdict) -> list[str]:
    """One note per output whose reference is non-finite somewhere (validation.json, console)."""
    notes = []
    for output, judged in verdict.outputs.items():
        metrics = judged.metrics
        if metrics is None or not metrics.ref_nonfinite:
            continue
        agree = metrics.ref_nonfinite - metrics.ref_nonfinite_mismatch
        notes.append(f"candidate {verdict.name}, output {output}: the reference is inf/NaN at {metrics.ref_nonfinite} "
                     f"position(s), left out of the metrics; the candidate holds the same value at {agree} of them"
                     + ("" if not metrics.ref_nonfinite_mismatch else " (FAIL)"))
    return notes
