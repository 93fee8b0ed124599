"""One trial of the accuracy search: materialise a plan, run it on the FP16 emulator, judge it.

`TrialRunner` holds what every trial shares (the FP32 reference results, the
tolerances, the plan of the nodes the search does not touch) and evaluates a
set of searched nodes kept FP32. It produces results and a verdict through the
validate library, so a trial passes exactly when the validate stage would pass
the same plan.

Decisions:
- The reference is the FP32 input model under `ReferenceRunner`, run once; a
  trial is a materialise + one emulated run per sample input, on one switched
  emulated graph built once for the whole search (`switched.py`), or on the
  candidate's own emulated graph where the switched one does not apply.
- Trials are cached by their FP32 set: the search may reach the same plan by
  two paths (bisection re-testing the all-low plan) and never pays twice.
- `worst` names the output and metric closest to (or furthest beyond) its
  bound, as a ratio to the bound where > 1 fails: value/bound for the upper
  bounds (max_abs, max_rel, abs_p99, rel_p99, rel_l2, pixels_off_8bit),
  (1 - cosine)/(1 - cosine_min) and (1 - argmax_agree)/(1 - argmax_agree_min), and for PSNR the ratio of the MSE to the MSE the bound
  allows, 10**((psnr_min - psnr)/10). The ratio makes
  different metrics comparable, so one number says how close a trial came.
- Should ONNX Runtime refuse the switched graph (a trtpipe defect: `TrtpipeGraphError`), the
  search goes on with each candidate's own emulated graph, the validate stage's way, and
  the log says why: a graph trtpipe built never ends the search of a valid model.
- Localisation (which node's output goes wrong first) runs on demand, on every
  sample input, with the reference's intermediates computed once.
- A quantized model's trials are judged by the validate stage's criterion, anchored on a float
  model (`validate/anchored.py`: `float_model`, else the QDQ model without its activations' rounding):
  the anchor runs once, with the reference. Judged against the QDQ model alone, the repair bought
  that bound with FP32 next to the Q/DQ (orientation, ONNX Runtime INT8: 64 of its 65 Casts) for
  code flips that are quantization noise. `worst` is then, per output, the criterion that comes
  closer to passing (the anchored one, or the bounds against the QDQ model), as the verdict is.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from trtpipe.errors import TrtpipeGraphError
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.validate.compare import BOUNDS as JUDGED_METRICS  # (metric, bound field, upper) per judged metric
from trtpipe.validate.anchor_model import anchor_for
from trtpipe.validate.anchored import AnchoredJudge, PlainJudge
from trtpipe.validate.compare import CandidateVerdict, Tolerances
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.validate.localize import Localization, localize_results
from trtpipe.numerics.metrics import json_float
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.search.switched import SwitchedEmulation, why_not_switched

log = logging.getLogger(__name__)


@dataclass
class Trial:
    """One line of the trial log."""

    trial: int
    step: str  # "automatic plan", "all low precision", "heavy", "cheap" (see fp32_set.py)
    fp32_count: int  # nodes computing in FP32 in this trial's plan (searched and fixed)
    fp32_added: list[str]  # relative to the plan the step started from
    fp32_removed: list[str]
    passed: bool
    worst: dict | None  # {output, metric, value, bound, ratio}
    seconds: float
    low_precision_flop_share: float = 0.0  # share of the MatMul/Gemm/Conv FLOPs computed in low precision
    errors: dict = field(default_factory=dict)  # metric -> its worst value over the outputs
    casts: int = 0  # Casts the materialiser inserted (each boundary between precisions costs one)

    def to_json(self) -> dict:
        entry = asdict(self)
        entry["worst"] = worst_json(self.worst)
        entry["low_precision_flop_share"] = round(self.low_precision_flop_share, 6)
        entry["errors"] = {key: json_float(value) for key, value in self.errors.items()}
        entry.pop("seconds")  # artifacts hold no wall-clock times (byte-identical reruns)
        return entry


@dataclass
class Outcome:
    """What a trial found (cached per plan; the materialised model is not kept, see `localize`)."""

    passed: bool
    worst: dict | None
    verdict: CandidateVerdict
    seconds: float = 0.0
    errors: dict = field(default_factory=dict)  # metric -> worst value over the outputs
    casts: int = 0  # Casts the materialiser inserted for this plan


@dataclass
class TrialRunner:
    model: onnx.ModelProto  # the FP32 model, nodes named as the parser names them
    fixed_precision: dict[str, str]  # materialiser precision of every node the search does not touch
    searchable: list[str]  # nodes the search sets to low precision or FP32, topological order
    feeds_list: list[dict[str, np.ndarray]]
    tolerances: Tolerances
    low_precision: str = "fp16"
    keep_io_types: bool = True
    switched: bool = True  # evaluate plans on one switched emulation where it applies (switched.py)
    float_model: Path | None = None  # a quantized model's anchor (validate.float_model), else derived
    _reference: list[dict[str, np.ndarray]] = field(default_factory=list, init=False)
    _reference_exposed: list[dict[str, np.ndarray]] | None = field(default=None, init=False)
    _cache: dict[frozenset, Outcome] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        reference = ReferenceRunner(self.model)
        self.outputs = list(reference.graph_outputs)
        self._reference = [reference.run(feeds) for feeds in self.feeds_list]
        anchor = anchor_for(self.model, self.float_model, self.feeds_list)
        self.judge = (AnchoredJudge(self._reference, self.outputs, self.tolerances, anchor=anchor) if anchor
                      else PlainJudge(self._reference, self.outputs, self.tolerances))
        self.fixed_fp32 = [name for name, precision in self.fixed_precision.items() if precision == "fp32"]
        self.not_switched = why_not_switched(self.model, self.low_precision, self.keep_io_types) if self.switched \
            else "switched emulation turned off"
        self._switched: SwitchedEmulation | None = None
        self.emulations = {"switched": 0, "full": 0}  # how the trials were evaluated

    def node_precision(self, fp32: frozenset[str]) -> dict[str, str]:
        """The materialiser's plan: fixed nodes as decided, searched nodes FP32 or low precision."""
        plan = dict(self.fixed_precision)
        plan.update({name: "fp32" if name in fp32 else self.low_precision for name in self.searchable})
        return plan

    def fp32_count(self, fp32: frozenset[str]) -> int:
        return len(self.fixed_fp32) + len(fp32)

    def cached(self, fp32: frozenset[str]) -> Outcome | None:
        return self._cache.get(fp32)

    def evaluate(self, fp32: frozenset[str]) -> Outcome:
        if fp32 in self._cache:
            return self._cache[fp32]
        start = time.perf_counter()
        candidate, report = materialize(self.model, self.node_precision(fp32), keep_io_types=self.keep_io_types)
        verdict = self.judge.judge("search", self._emulated(candidate, report))
        outcome = Outcome(verdict.passed, worst_bound(verdict, self.tolerances), verdict,
                          errors=worst_per_metric(verdict), casts=int(report["casts_added"]["count"]))
        outcome.seconds = time.perf_counter() - start
        self._cache[fp32] = outcome
        return outcome

    def evaluate_in_full(self, fp32: frozenset[str]) -> CandidateVerdict:
        """The verdict of the plan on its own emulated graph (the validate stage's way), uncached."""
        candidate, _ = materialize(self.model, self.node_precision(fp32), keep_io_types=self.keep_io_types)
        runner = EmulatedRunner(candidate)
        return self.judge.judge("search", [runner.run(feeds) for feeds in self.feeds_list])

    def _emulated(self, candidate: onnx.ModelProto, report: dict) -> list[dict[str, np.ndarray]]:
        """The candidate's outputs per sample input: on the switched emulation when the candidate
        maps onto it, else on the candidate's own emulated graph."""
        if self.not_switched is None and self._switched is None:
            try:
                self._switched = SwitchedEmulation(self.model)
            except TrtpipeGraphError as error:
                self.not_switched = f"ONNX Runtime refused the switched graph: {error}"
                log.warning("precision search: %s; every trial runs on its own emulated graph instead",
                            self.not_switched)
        switches = self._switched.switches(candidate, report) if self._switched else None
        if switches is not None:
            self.emulations["switched"] += 1
            return [self._switched.run(feeds, switches) for feeds in self.feeds_list]
        self.emulations["full"] += 1
        runner = EmulatedRunner(candidate)
        return [runner.run(feeds) for feeds in self.feeds_list]

    def localize(self, fp32: frozenset[str]) -> list[Localization]:
        """Per sample input, where the plan's intermediates go wrong. The plan is materialised again
        (~20 ms on the built-ins) rather than kept from its trial: a cache of every trial's model
        would hold `max_trials` copies of the weights."""
        candidate, _ = materialize(self.model, self.node_precision(fp32), keep_io_types=self.keep_io_types)
        emulated = EmulatedRunner(candidate, expose_intermediates=True)
        return [
            localize_results(reference, emulated.run(feeds), candidate, emulated.precisions)
            for reference, feeds in zip(self._exposed_reference(), self.feeds_list)
        ]

    def reference_magnitudes(self) -> dict[str, float]:
        """Tensor name -> the largest finite |value| the FP32 reference holds there, over all inputs."""
        largest: dict[str, float] = {}
        for values in [*self._exposed_reference(), *self.feeds_list]:
            for name, array in values.items():
                array = np.asarray(array)
                if array.dtype.kind == "f" and array.size:
                    finite = np.abs(array[np.isfinite(array)], dtype=np.float64)
                    largest[name] = max(largest.get(name, 0.0), float(finite.max()) if finite.size else 0.0)
        return largest

    def _exposed_reference(self) -> list[dict[str, np.ndarray]]:
        if self._reference_exposed is None:
            exposed = ReferenceRunner(self.model, expose_intermediates=True)
            self._reference_exposed = [exposed.run(feeds) for feeds in self.feeds_list]
        return self._reference_exposed


def worst_json(worst: dict | None) -> dict | None:
    """`worst` with non-finite numbers as JSON strings (see metrics.json_float)."""
    if worst is None:
        return None
    return {key: json_float(value) if isinstance(value, float) else value for key, value in worst.items()}


def worst_text(worst: dict | None) -> str:
    """`worst` as one phrase: the output, the metric, its value and bound."""
    if not worst:
        return "no bound set"
    if worst["metric"] == "nonfinite":
        return f"{worst['output']}: {int(worst['value'])} non-finite values"
    if worst["metric"] == "missing":
        return f"{worst['output']}: missing"
    against = " against the anchor" if worst.get("against") == "anchor" else ""
    return f"{worst['output']}: {worst['metric']} {worst['value']:.6g}{against} vs bound {worst['bound']:g}"


def worst_per_metric(verdict: CandidateVerdict) -> dict[str, float]:
    """Per metric the comparator judges by (compare.py's bounds, so new metrics join by
    themselves), its worst value over the outputs, plus the non-finite count."""
    worst: dict[str, float] = {}
    for judged in verdict.outputs.values():
        if judged.metrics is None:
            continue
        worst["nonfinite"] = worst.get("nonfinite", 0) + int(judged.metrics.nonfinite)
        for metric, _, upper in JUDGED_METRICS:
            value = getattr(judged.metrics, metric, None)
            if value is None:
                continue
            value = float(value)
            if metric not in worst or math.isnan(value):
                worst[metric] = value
            elif not math.isnan(worst[metric]):
                worst[metric] = max(worst[metric], value) if upper else min(worst[metric], value)
    return worst


def worst_bound(verdict: CandidateVerdict, tolerances: Tolerances) -> dict | None:
    """The output metric closest to (or furthest past) its bound; see the module docstring. Under the
    anchored criterion, per output the better of its two ways to pass (against the anchor or the QDQ model)."""
    anchored = verdict.anchored
    plain = anchored.plain if anchored is not None else verdict
    worst = None
    for output, judged in plain.outputs.items():
        entry = _output_worst(output, judged, tolerances.for_output(output))
        against = anchored.verdict.outputs.get(output) if anchored is not None else None
        if against is not None and entry is not None:
            other = _output_worst(output, against, anchored.tolerances.for_output(output))
            if other is not None and other["ratio"] < entry["ratio"]:
                entry = {**other, "against": "anchor"}
        if entry is None:
            continue
        if entry["metric"] == "missing":
            return entry
        nonfinite = entry["metric"] == "nonfinite"
        if worst is None or (nonfinite and worst["metric"] != "nonfinite") \
                or (not nonfinite and worst["metric"] != "nonfinite" and entry["ratio"] > worst["ratio"]):
            worst = entry
    return worst


def _output_worst(output: str, judged, tolerance) -> dict | None:
    if judged.metrics is None:
        return {"output": output, "metric": "missing", "value": None, "bound": None, "ratio": math.inf}
    if judged.metrics.nonfinite:
        return {"output": output, "metric": "nonfinite", "value": float(judged.metrics.nonfinite), "bound": 0.0,
                "ratio": math.inf}
    worst = None
    for metric, bound_name, upper in JUDGED_METRICS:
        bound, value = getattr(tolerance, bound_name, None), getattr(judged.metrics, metric, None)
        if bound is None or value is None:
            continue
        ratio = bound_ratio(metric, value, bound, upper)
        if worst is None or ratio > worst["ratio"]:
            worst = {"output": output, "metric": metric, "value": value, "bound": bound, "ratio": ratio}
    return worst


def bound_ratio(metric: str, value: float, bound: float, upper: bool = True) -> float:
    """How much of its allowance a metric uses: <= 1 passes, > 1 fails."""
    if math.isnan(value):
        return math.inf
    if not upper and metric not in ("cosine", "argmax_agree", "psnr"):  # another lower bound: bound / value
        return math.inf if value <= 0.0 else max(bound, 0.0) / value
    if metric in ("cosine", "argmax_agree"):  # the disagreement used of the disagreement allowed
        allowed, used = 1.0 - bound, 1.0 - value
    elif metric == "psnr":
        exponent = (bound - value) / 10.0
        return math.inf if exponent > 300 else 10.0**exponent
    else:
        allowed, used = bound, value
    if allowed <= 0.0:
        return 0.0 if used <= 0.0 else math.inf
    return max(used, 0.0) / allowed
