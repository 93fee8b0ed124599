"""Localisation: the first node of a failing candidate whose output goes wrong.

Two halves, like the rest of `validate`: `localize` runs the FP32 reference
and the emulated candidate with every float intermediate exposed, on the same
inputs; `localize_results` judges those results tensor by tensor.

Decisions:
- Tensors are matched by *name*. The emulated graph keeps the candidate's
  tensor names, and the passes that make a candidate (precision, opset
  upgrade) keep the names of the tensors they do not remove. Node names are
  not used for matching, because a candidate built from another graph may
  name its nodes differently. Candidate tensors without a counterpart (Casts
  the precision stage inserted, outputs of fused nodes) are listed as
  `unmatched` and not judged; every name reported is a candidate ONNX node name.
- Order: a stable topological order of the candidate graph, which is its file
  order whenever that is already topological (ONNX requires it).
- A tensor fails when the candidate is non-finite where the reference is
  finite, or when max|candidate - reference| exceeds `threshold` (default 1%)
  of the reference's scale max|reference| (floored at SCALE_FLOOR so an
  all-zero tensor does not divide by zero). One FP16 rounding is 0.05% of
  scale at most, so 1% leaves room for accumulated rounding and flags real
  damage: overflow, collapsed normalisation, lost small terms.
- Outputs of nodes without inputs (`Constant`, the exporter's way of writing
  an initializer) fail only when non-finite (the FP32-min mask constant that
  became -inf), not on their rounding error: like an initializer, a constant
  is a fixed perturbation whose effect is judged at the op that consumes it
  (an eps of 1e-6 is 1.3% off in FP16 and harmless when added to a variance).
- Two kinds of failure, two findings, each the first of its kind in that
  order: `first_nonfinite`, the first tensor that is inf/NaN where the
  reference is finite, and `first_above_threshold`, the first tensor whose
  error is finite and above the threshold. `first` is the non-finite one when
  there is one, else the one above the threshold; each finding says its
  `kind` ("nonfinite" or "above_threshold"). Why non-finite first: an inf is
  never rounding noise, and the node that makes it (an overflow, a -inf mask
  constant, 0 * inf) is what the user must protect. A node above the threshold
  earlier in the graph is often real damage too (and may be what feeds the
  overflow), so it is still reported, but the place where values stop being
  numbers is the one a user cannot find by looking at errors: every tensor
  after it is inf/NaN as well.
- Several independent
  problems can exist (the naive transformer has an overflowing LayerNorm *and*
  an FP32-min mask that became -inf), and which of them a topological order
  visits first is arbitrary, so `origins` also lists every failure none of
  whose inputs failed: each is a place where error enters the graph rather
  than a place it merely flows through; and every non-finite tensor none of
  whose inputs is non-finite, even when an input was already above the
  threshold (a rounding error that a later node squares past 65504 enters
  twice: as error, then as inf). A failure is traced through unmatched
  tensors (a failing input of an inserted Cast taints its output).
- A finding at an FP32 node names an amplifier, not an origin: `localize` adds
  `amplifies` to it, the nearest upstream low-precision nodes ranked by the
  error their rounding alone gives it, measured on the reference run
  (upstream_origins.py), and its reason names the top one.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.metrics import json_float
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.auto.masked_additions import NEGATIVE_INF_SAFE
from trtpipe.validate.upstream_origins import explain_amplifiers

DEFAULT_THRESHOLD = 1e-2
SCALE_FLOOR = 1e-6
# Largest finite values, to explain a non-finite tensor as an overflow.
LARGEST_VALUE = {"fp16": 65504.0, "bf16": 3.3895313892515355e38}


@dataclass
class TensorError:
    """One compared tensor: what the reference holds and how far the candidate is from it."""

    node: str
    op_type: str
    tensor: str
    precision: str
    ref_max_abs: float
    cand_max_abs_error: float
    cand_nonfinite: int
    relative_error: float
    failed: bool
    # Positions where the reference lies beyond the precision's largest value and the candidate
    # saturated with it (same sign, at or beyond that value): not counted as error.
    cand_saturated: int = 0

    def to_json(self) -> dict:
        fields = asdict(self)
        return {key: json_float(value) if isinstance(value, float) else value for key, value in fields.items()}


@dataclass
class Localization:
    # {node, op_type, tensor, precision, ref_max_abs, cand_max_abs_error, cand_nonfinite, kind, reason}
    first: dict | None  # first_nonfinite if there is one, else first_above_threshold
    origins: list[dict]  # same fields, every place error or inf/NaN enters (see module docstring)
    tensors: list[TensorError]  # every compared tensor, topological order (for a plot)
    unmatched: list[str]  # candidate tensors without a reference counterpart
    threshold: float
    first_nonfinite: dict | None = None
    first_above_threshold: dict | None = None

    def findings(self) -> list[dict]:
        """Every finding dict, each once: the first ones (first, the two kinds), then the origins."""
        unique = {id(found): found for found in (self.first, self.first_nonfinite, self.first_above_threshold,
                                                  *self.origins) if found}
        return list(unique.values())

    def to_json(self) -> dict:
        return {
            "first": self.first,
            "first_nonfinite": self.first_nonfinite,
            "first_above_threshold": self.first_above_threshold,
            "origins": self.origins,
            "threshold": self.threshold,
            "nodes": [entry.to_json() for entry in self.tensors],
            "unmatched": self.unmatched,
        }


def localize(
    reference_model: onnx.ModelProto,
    candidate_model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> Localization:
    """Run both models with intermediates exposed on `feeds` and localise the first failure."""
    reference = ReferenceRunner(reference_model, expose_intermediates=True).run(feeds)
    emulated = EmulatedRunner(candidate_model, expose_intermediates=True)
    candidate = emulated.run(feeds)
    found = localize_results(reference, candidate, candidate_model, emulated.precisions, threshold=threshold)
    explain_amplifiers(found.findings(), reference_model, candidate_model, feeds, reference, emulated.precisions)
    return found


def localize_results(
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    candidate_model: onnx.ModelProto,
    precisions: dict[str, str],
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> Localization:
    """Judge exposed intermediates tensor by tensor, in topological order of `candidate_model`."""
    tainted: set[str] = set()  # failed tensors, and unmatched ones computed from them
    nonfinite: set[str] = set()  # the same for non-finite tensors
    tensors, unmatched, origins = [], [], []
    mask_like = _reaching_softmax_only(candidate_model.graph)
    for index, node in topological_order(candidate_model.graph):
        inputs_failed = any(name in tainted for name in node.input)
        inputs_nonfinite = any(name in nonfinite for name in node.input)
        for name in node.output:
            if name not in candidate or not _is_float(candidate[name]):
                continue
            counterpart = reference.get(name)
            comparable = (
                counterpart is not None and _is_float(counterpart)
                and np.shape(counterpart) == np.shape(candidate[name])
            )
            if not comparable:
                unmatched.append(name)
                if inputs_failed:
                    tainted.add(name)
                if inputs_nonfinite:
                    nonfinite.add(name)
                continue
            entry = _tensor_error(node, index, name, reference[name], candidate[name], precisions, threshold,
                                  name in mask_like)
            tensors.append(entry)
            if entry.failed:
                tainted.add(name)
            if entry.cand_nonfinite:
                nonfinite.add(name)
            if entry.failed and (not inputs_failed or (entry.cand_nonfinite and not inputs_nonfinite)):
                origins.append(_finding(entry, threshold))
    nonfinite = next((_finding(entry, threshold) for entry in tensors if entry.cand_nonfinite), None)
    above = next((_finding(entry, threshold) for entry in tensors if entry.failed and not entry.cand_nonfinite),
                 None)
    return Localization(nonfinite or above, origins, tensors, unmatched, threshold,
                        first_nonfinite=nonfinite, first_above_threshold=above)


def topological_order(graph: onnx.GraphProto) -> list[tuple[int, onnx.NodeProto]]:
    """(file index, node) in a topological order that keeps file order wherever it can."""
    producer = {out: index for index, node in enumerate(graph.node) for out in node.output if out}
    waiting_on = [{producer[name] for name in node.input if name in producer} - {index}
                  for index, node in enumerate(graph.node)]
    consumers: dict[int, list[int]] = {}
    for index, needed in enumerate(waiting_on):
        for source in needed:
            consumers.setdefault(source, []).append(index)
    ready = [index for index, needed in enumerate(waiting_on) if not needed]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append((index, graph.node[index]))
        for consumer in consumers.get(index, []):
            waiting_on[consumer].discard(index)
            if not waiting_on[consumer]:
                heapq.heappush(ready, consumer)
    if len(order) != len(graph.node):
        raise ValueError("the candidate graph has a cycle; it cannot be ordered topologically")
    return order


def _is_float(array) -> bool:
    return np.asarray(array).dtype.kind == "f"


def _tensor_error(node, index, name, reference, candidate, precisions, threshold, mask_like=False) -> TensorError:
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    target = np.isfinite(ref)
    saturated = target & (_saturated_with_reference(ref, cand, precisions.get(name)) if mask_like else False)
    broken = target & ~np.isfinite(cand) & ~saturated
    nonfinite = int(broken.sum())
    scale = float(np.abs(ref[target]).max()) if target.any() else 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(cand[target & ~saturated] - ref[target & ~saturated])
    max_error = float("inf") if nonfinite else (float(error.max()) if error.size else 0.0)
    relative = max_error / max(scale, SCALE_FLOOR)
    return TensorError(
        node=node.name or f"<unnamed {node.op_type} #{index}>",
        op_type=node.op_type,
        tensor=name,
        precision=precisions.get(name, "unknown"),
        ref_max_abs=scale,
        cand_max_abs_error=max_error,
        cand_nonfinite=nonfinite,
        relative_error=relative,
        failed=nonfinite > 0 or (relative > threshold and len(node.input) > 0),
        cand_saturated=int(saturated.sum()),
    )


# Ops through which a very negative value reaches Softmax unchanged in effect (a mask's path).
_MASK_PATH = frozenset({"Add", "Cast"})


def _reaching_softmax_only(graph: onnx.GraphProto) -> set[str]:
    """Tensors every path of which goes through Add/Cast into Softmax (an additive attention mask):
    there -inf or the range's end gives what the reference's huge negative value gives (0)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in set(node.input):
            consumers.setdefault(name, []).append(node)
    outputs = {output.name for output in graph.output}
    safe: dict[str, bool] = {}

    def reaches(name: str, depth: int = 0) -> bool:
        if name not in safe:
            readers = consumers.get(name, [])
            safe[name] = bool(readers) and name not in outputs and depth < 64 and all(
                (reader.op_type in NEGATIVE_INF_SAFE and reader.input[0] == name)
                or (reader.op_type in _MASK_PATH and all(reaches(out, depth + 1) for out in reader.output))
                for reader in readers)
        return safe[name]

    return {name for name in consumers if reaches(name)}


def _saturated_with_reference(ref: np.ndarray, cand: np.ndarray, precision: str | None) -> np.ndarray:
    """Decision: on a tensor that reaches only Softmax through Add/Cast, a value the reference holds
    below the precision's range (an attention mask's float32 minimum) that the candidate holds at
    that range's end or at -inf is the saturation the precision implies, not an error that grew
    here (Softmax gives 0 for both): counting it made a mask
    `Mul` the "first node above the threshold" with error 3.4e38 while the softmax after it
    gives the same result. The same holds for its infinite form (the planner's FP16 mask is
    -inf, masked_additions.py); NaN, or an inf where the reference is in range, stays an error."""
    largest = LARGEST_VALUE.get(precision or "")
    if largest is None:
        return np.zeros(ref.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return (ref < -largest) & (cand <= -largest)


def _finding(entry: TensorError, threshold: float) -> dict:
    found = {key: value for key, value in entry.to_json().items() if key not in ("failed", "relative_error")}
    found["kind"] = "nonfinite" if entry.cand_nonfinite else "above_threshold"
    found["reason"] = _reason(entry, threshold)
    return found


def _reason(entry: TensorError, threshold: float) -> str:
    if entry.cand_nonfinite:
        text = (f"{entry.cand_nonfinite} non-finite values in {entry.precision} tensor {entry.tensor} "
                "where the reference is finite")
        largest = LARGEST_VALUE.get(entry.precision)
        if largest is not None and entry.ref_max_abs > largest:
            text += (f"; the reference reaches {entry.ref_max_abs:.4g}, above the largest "
                     f"{entry.precision} value {largest:.6g} (overflow)")
        return text
    text = (f"max error {entry.cand_max_abs_error:.4g} is {entry.relative_error:.2%} of the reference's "
            f"max |x| {entry.ref_max_abs:.4g} in {entry.precision} tensor {entry.tensor} "
            f"(threshold {threshold:.2%})")
    if entry.cand_saturated:
        text += f"; {entry.cand_saturated} values saturated with the reference beyond the {entry.precision} range not counted"
    return text
