"""The verdict of a quantized model, anchored on a float model (issue 31, item 4).

For a Q/DQ model the reference is the QDQ model itself (fake-quant in the reference and the
candidate alike). FP16 around a QuantizeLinear moves some inputs across a rounding boundary, so a
code flips by one step and, in a deep network, each flip feeds the next quantizer: measured on two
ModelOpt INT8 CNNs, the FP16 candidate was 0.070 rel_l2 from the QDQ model (bound 0.044) while,
against the float model, it was as close as the QDQ model or closer (0.029 vs 0.041; 0.135 vs
0.181). A bound meant for what FP16 adds to a float model measured the quantization's own noise.

The criterion. With an anchor `f` (a model without the activation quantization: the float model,
`validate.float_model`, or the one derived from the QDQ model, `anchor_model.py`), the QDQ reference
`r` and a candidate `c`, each bounded metric `m` with the recipe's bound `b` holds when
`m(c, f)` is within `m(r, f)` widened by `b` through the triangle inequality:

- rel_l2: `rel_l2(c,f) <= rel_l2(r,f) + b * (1 + rel_l2(r,f))`. From ||c-f|| <= ||c-r|| + ||r-f||
  and ||r|| <= ||f|| + ||r-f||: a candidate with rel_l2(c,r) <= b meets it, whatever the model.
- max_abs: `max_abs(c,f) <= max_abs(r,f) + b` (the same inequality, elementwise).
- cosine_min, as angles (the angle between vectors is a metric on the sphere):
  `angle(c,f) <= angle(r,f) + arccos(cosine_min)`.
- psnr_min, through the RMS error: `rmse(c,f) <= rmse(r,f) + peak_r * 10^(-psnr_min/20)`, where
  `peak_r` is the peak the bound against `r` is measured with (metrics.image_peak), read back as a
  PSNR against `f`'s peak.
- argmax_agree_min, by the union bound: a position where c's class differs from f's has c differ
  from r or r from f, so `1 - agree(c,f) <= (1 - agree(r,f)) + (1 - argmax_agree_min)`.
- max_rel, rel_p99, abs_p99, pixels_off_8bit have no triangle inequality (an elementwise
  denominator that is f's, not r's; a 99th percentile of a sum is not below the sum of the
  percentiles; a level move of one, twice, is two): they are shifted additively, `m(c,f) <= m(r,f)
  + b`, the same form as the others, the one that asks nothing of FP16 beyond the recipe's bound.

Decisions:
- A candidate passes an output when it meets the anchored bounds *or* the recipe's bounds against
  the QDQ reference (today's verdict): for the metrics above with a triangle inequality the first
  implies nothing stricter than the second, and for the shifted ones the "or" keeps the criterion
  never stricter than judging against the QDQ model. Non-finite candidate values fail either way.
- Iterations: each metric of `r` against `f` is its worst over the sample inputs, the widened bound
  is monotone in it, and the candidate's metric is its worst as well, so the property above holds
  for the aggregate (PSNR: the largest ratio of peaks over the inputs).
- An output the anchor does not have, or where the QDQ reference itself is non-finite or undefined
  against the anchor, has no anchored bound: it is judged against the QDQ reference alone.
- The widened bounds per output are in validation.json (`quantized.criterion`) and on the console:
  no number of any model is in them, only the recipe's bound and the measured `m(r, f)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from trtpipe.numerics.metrics import OutputMetrics, image_peak
from trtpipe.validate.compare import CandidateVerdict, OutputVerdict, Tolerance, Tolerances, compare_candidate

TRIANGLE = ("rel_l2", "max_abs", "cosine_min", "psnr_min", "argmax_agree_min")
SHIFTED = ("max_rel", "rel_p99", "abs_p99", "pixels_off_8bit")
METRIC = {"cosine_min": "cosine", "psnr_min": "psnr", "argmax_agree_min": "argmax_agree"}


@dataclass(frozen=True)
class Anchor:
    """The anchor's outputs per sample input and where they come from (printed and recorded)."""

    runs: list[dict]
    source: str  # "validate.float_model" or "derived"
    description: str  # the float model's path, or what was removed from the QDQ model


@dataclass
class PlainJudge:
    """Today's criterion: each candidate against the reference with the recipe's bounds."""

    reference_runs: list[dict]
    outputs: list[str]
    tolerances: Tolerances
    min_compared: float = 0.0

    def judge(self, name: str, candidate_runs: list[dict]) -> CandidateVerdict:
        return compare_candidate(name, self.reference_runs, candidate_runs, self.outputs, self.tolerances,
                                 self.min_compared)


@dataclass
class AnchoredJudge(PlainJudge):
    """The module docstring's criterion: the QDQ reference against the anchor is measured once, here."""

    anchor: Anchor | None = None
    widened: dict[str, Tolerance | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        anchored = [name for name in self.outputs if all(name in run for run in self.anchor.runs)]
        measured = compare_candidate("reference", self.anchor.runs, self.reference_runs, anchored,
                                     Tolerances(Tolerance()))
        self.reference_vs_anchor = measured
        for name in self.outputs:
            judged = measured.outputs.get(name)
            self.widened[name] = None if judged is None or judged.metrics is None else widened_tolerance(
                self.tolerances.for_output(name), judged.metrics, _peak_ratio(name, self.reference_runs,
                                                                              self.anchor.runs))

    def judge(self, name: str, candidate_runs: list[dict]) -> CandidateVerdict:
        plain = super().judge(name, candidate_runs)
        bounded = [output for output in self.outputs if self.widened[output] is not None]
        per_output = {output: self.widened[output] for output in bounded}
        widened = Tolerances(Tolerance(), per_output)
        against = compare_candidate(name, self.anchor.runs, candidate_runs, bounded, widened, self.min_compared)
        outputs = {}
        for output, verdict in plain.outputs.items():
            anchored = against.outputs.get(output)
            passed = verdict.passed or (anchored is not None and anchored.passed)
            reasons = [] if passed else verdict.reasons
            if not passed and anchored is not None:
                reasons = [f"against the anchor, {reason}" for reason in anchored.reasons] + reasons
            outputs[output] = OutputVerdict(verdict.metrics, passed, reasons)
        combined = CandidateVerdict(name, all(v.passed for v in outputs.values()), outputs, plain.iterations)
        combined.anchored = AnchoredVerdict(against, widened, plain)
        return combined

    def to_json(self) -> dict:
        """`quantized.criterion` of validation.json: the anchor and the widened bounds per output."""
        return {"kind": "anchored", "anchor": {"source": self.anchor.source, "description": self.anchor.description},
                "bounds": {name: None if bound is None else _set(bound) for name, bound in self.widened.items()},
                "reference_vs_anchor": {name: None if v.metrics is None else v.metrics.to_json()
                                        for name, v in self.reference_vs_anchor.outputs.items()}}


@dataclass
class AnchoredVerdict:
    """The candidate against the anchor (judged by the widened bounds) and against the QDQ reference alone."""

    verdict: CandidateVerdict
    tolerances: Tolerances
    plain: CandidateVerdict


def widened_tolerance(tolerance: Tolerance, reference: OutputMetrics, peak_ratio: float = 1.0) -> Tolerance | None:
    """`tolerance` widened by the QDQ reference's metrics against the anchor (module docstring); None
    where the reference is non-finite or a bounded metric undefined against the anchor (no anchored
    bound: the output is judged against the QDQ reference alone)."""
    if reference.nonfinite or reference.ref_nonfinite_mismatch:
        return None
    values = {}
    for bound in (f.name for f in fields(Tolerance)):
        limit = getattr(tolerance, bound)
        measured = getattr(reference, METRIC.get(bound, bound), None)
        if limit is None or measured is None:
            continue
        if math.isnan(measured):
            return None
        values[bound] = _widened(bound, limit, float(measured), peak_ratio)
    return Tolerance(**values)


def _widened(bound: str, limit: float, measured: float, peak_ratio: float) -> float:
    if bound == "rel_l2":
        return measured + limit * (1.0 + measured)
    if bound == "cosine_min":
        angle = math.acos(min(1.0, max(-1.0, measured))) + math.acos(min(1.0, max(-1.0, limit)))
        return math.cos(min(math.pi, angle))
    if bound == "psnr_min":  # both as RMS errors relative to the anchor's peak
        rms = 10.0 ** (-measured / 20.0) + peak_ratio * 10.0 ** (-limit / 20.0)
        return -20.0 * math.log10(rms) if rms > 0.0 else math.inf
    if bound == "argmax_agree_min":
        return measured - (1.0 - limit)
    return measured + limit  # max_abs (triangle) and the shifted ones (SHIFTED)


def _peak_ratio(output: str, reference_runs: list[dict], anchor_runs: list[dict]) -> float:
    """The largest peak_r / peak_f over the inputs, for a 4-D output (psnr's); 1.0 otherwise."""
    ratios = []
    for reference, anchor in zip(reference_runs, anchor_runs):
        r, f = (np.asarray(run.get(output)) if not isinstance(run.get(output), list) else None
                for run in (reference, anchor))
        if r is None or f is None or r.ndim != 4 or r.shape != f.shape:
            return 1.0
        r, f = r[np.isfinite(r)].astype(np.float64), f[np.isfinite(f)].astype(np.float64)
        if not r.size or not f.size:
            return 1.0
        ratios.append(image_peak(r) / image_peak(f))
    return max(ratios, default=1.0)


def _set(tolerance: Tolerance) -> dict:
    return {f.name: getattr(tolerance, f.name) for f in fields(tolerance) if getattr(tolerance, f.name) is not None}
