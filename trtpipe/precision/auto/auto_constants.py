"""Automatic rule: constants that do not fit the low-precision type.

An initializer or Constant with finite values beyond ±65504 becomes ±inf in FP16
(the Hugging Face attention mask, -3.4e38, turns outputs into NaN that way): its
real consumers stay FP32 (`keep_fp32`), or the values are clipped by the
materialiser (`saturate`), or nothing is done (`off`). ±inf and NaN are FP16
values, stored unchanged: they keep no consumer FP32 (`-inf` masks, issue 30).

Values below FP16's smallest subnormal flush to zero. Whether that matters is
decided per constant and consumer by its effect, and the measure is recorded
(`constants` in the plan, and in the reason of every consumer kept FP32):

- an epsilon guard: a small tensor (≤ 16 values) added (Add, Sub, Max, Clip) to
  a value that then reaches a singular reader (Log, a divisor, Reciprocal, Pow
  with a negative exponent, Sqrt then a divisor: underflow.singular_slot): its
  consumer stays FP32, and so do the nodes from it to the readers it guards
  (underflow.guarded_readers). Decision: it guards against inputs the samples may
  not contain (a zero variance, a silent frame); flushed, log 0 or x/0 follows, and
  no measurement on the samples can show it; its consumer alone in FP32 guards
  nothing, since the output is cast to FP16 for the reader and the epsilon flushes
  there (issue 21: Add(x², 1e-10) FP32, then an FP16 Log read zeros);
- a divisor: a constant the consumer divides by (the divisor of Div, the base of
  Reciprocal or of a negative Pow, BatchNormalization's variance): always
  measured with data, and kept FP32 without data. Decision: its effect is not
  linear, so a small share of its L2 norm says nothing (a variance of 1e-9 among
  variances of 1 scales its channel by sqrt(var + epsilon));
- otherwise, a flushed share of the constant's L2 norm below `MEASURE_FROM`
  (1e-5, a hundredth of the limit): negligible, converted without measuring.
  Decision: this is the common case (a trained weight of millions of values, or
  a bias, holds a few denormals; a bias of 1e-9 next to biases of 0.1 moves its
  channel by 1e-9), and measuring costs a single-node run per consumer. Small
  tensors are no exception (issue 21: a 16-channel first Conv stayed FP32 for a
  1e-9 bias);
- otherwise, with an FP32 reference run at hand: the measured effect of the
  flush on each real consumer's output (flush_effect.py), relative L2 change
  on the sample inputs; a consumer stays FP32 when it reaches `EFFECT_LIMIT`;
- otherwise (no sample data): the flushed values' share of the constant's L2
  norm, against the same limit.

Decision: `EFFECT_LIMIT` = 1e-3, twice FP16's own rounding of any value
(2^-11 ≈ 4.9e-4 relative): a flush below it changes the consumer less than
storing its output in FP16 does anyway. A few sub-FP16 entries of a normal
weight matrix (denormals left by training) therefore do not keep a MatMul
FP32; a weight whose values all sit below FP16's range does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtpipe.onnxmodel.weights_on_disk import tensor_array, tensor_nbytes
from trtpipe.precision.network.batched_threads import map_in_batches
from trtpipe.precision.network.decisions import FP16_MAX, FP16_MIN_SUBNORMAL
from trtpipe.precision.network.network import FLOAT_TYPES, Network
from trtpipe.precision.network.passthrough import passthrough_views, real_consumers

_SMALL_TENSOR = 16
EFFECT_LIMIT = 1e-3
MEASURE_FROM = EFFECT_LIMIT / 100
FLUSH_THRESHOLD = FP16_MIN_SUBNORMAL / 2  # below this (in magnitude), a value becomes 0 in FP16
_GUARDING_OPS = frozenset({"Add", "Sub", "Max", "Clip"})
_DIVISOR_SLOTS = {"BatchNormalization": 4}  # the running variance: y = (x - mean) / sqrt(var + epsilon)
_THREADS = 2


@dataclass(frozen=True)
class ConstantProblem:
    kind: str  # "exceeds" or "flushes"
    magnitude: float  # the largest |value| (exceeds) or the smallest flushed |value| (flushes)
    flushed: int = 0  # how many non-zero values flush
    flushed_share: float = 0.0  # their share of the tensor's L2 norm
    small: bool = False  # at most _SMALL_TENSOR values


def constant_problems(net: Network, low_precision: str) -> dict[str, ConstantProblem]:
    """tensor name -> its problem, for constants that do not fit FP16.

    BF16 has FP32's range but for finite values beyond 3.3895e38 (FP32's own extremes, such as
    finfo(float32).min masks), which the materialiser clips to that value and reports (weights.py).

    Decision: tensors are checked on two threads (reading a weight and NumPy's
    reductions release the GIL), in batches (batched_threads.py): on a 2.7 GB model this
    is every weight read once.
    """
    if low_precision != "fp16":
        return {}
    checked = [(name, tensor) for name, tensor in net.constants.items()
               if tensor.data_type in FLOAT_TYPES and real_consumers(net, name)]
    found = map_in_batches(lambda item: _problem(tensor_array(item[1])), checked,
                           lambda item: tensor_nbytes(item[1]), _THREADS)
    return {name: problem for (name, _), problem in zip(checked, found) if problem is not None}


def _problem(array: np.ndarray) -> ConstantProblem | None:
    """Decision: in the tensor's own float type (no float64 copy of a 2 GB model's weights), with
    the cheap tests first; 65504 and FP16's flush threshold are exact in every float type checked."""
    if array.size == 0:
        return None
    values = array.ravel()
    if values.dtype not in (np.float16, np.float32, np.float64):  # bfloat16 (ml_dtypes): widen, exactly
        values = values.astype(np.float32)
    largest = float(np.fmax(values.max(), -values.min()))  # inf or NaN when the tensor holds one
    if not largest <= FP16_MAX:
        largest = _largest_finite(values)
        if largest > FP16_MAX:
            return ConstantProblem("exceeds", largest)
    below = (values < FLUSH_THRESHOLD) & (values > -FLUSH_THRESHOLD)  # zeros included; inf and NaN are not
    if not below.any():
        return None
    flushed = values[below]
    flushed = np.abs(flushed[flushed != 0]).astype(np.float64)
    if not flushed.size:
        return None
    total = float(np.linalg.norm(values))  # BLAS nrm2: one pass, scaled (no overflow), no copy
    if not np.isfinite(total):  # an inf or NaN entry: the share among the finite values, which carry a norm
        total = float(np.linalg.norm(values[np.isfinite(values)]))
    share = float(np.linalg.norm(flushed)) / total if total > 0 else 1.0
    return ConstantProblem("flushes", float(flushed.min()), int(flushed.size), share, values.size <= _SMALL_TENSOR)


def _largest_finite(values: np.ndarray) -> float:
    """The largest finite |value| (0 when there is none).

    Decision: +-inf and NaN are FP16 values, stored as they are (weights.py keeps them, the
    emulator reads them back unchanged), so they are no reason to keep a consumer FP32; only a
    finite value beyond 65504 changes when stored (issue 30: a DistilBERT export's masked_fill(-inf)
    kept its 6 Where nodes FP32 with 12 Casts). A NaN must not hide a finite 1e6 either (NumPy's
    max of an array holding NaN is NaN)."""
    finite = values[np.isfinite(values)]
    return float(np.fmax(finite.max(), -finite.min())) if finite.size else 0.0


def flush_inputs(net: Network, problems: dict[str, ConstantProblem]) -> set[str]:
    """Tensors whose reference values the flush measurement needs: the inputs of the real consumers
    of flushing constants (epsilon guards are decided without data)."""
    needed: set[str] = set()
    for name, problem in problems.items():
        if _measurable(problem, _roles(net, name)):
            for consumer in real_consumers(net, name):
                needed.update(t for t in net.nodes[consumer].input if t)
    return needed


def constant_decisions(net: Network, low_precision: str, problems: dict[str, ConstantProblem] | None = None,
                       observed=None, record: dict | None = None) -> dict[str, tuple[str, float]]:
    """node -> (reason, magnitude): the real consumers that must stay FP32.

    `observed` (auto_range.Observed with the `flush_inputs` kept) enables the measured
    criterion; `record`, when given, receives `constants`: every flushing constant, its
    measure and the decision.
    """
    from trtpipe.precision.auto.flush_effect import flush_effects

    if problems is None:
        problems = constant_problems(net, low_precision)
    decisions: dict[str, tuple[str, float]] = {}
    flushing = []
    for name, problem in problems.items():
        consumers = real_consumers(net, name)
        if problem.kind == "exceeds":
            reason = f"constant {name} has |value| {problem.magnitude:.3g} > {FP16_MAX:g} (would become inf in fp16)"
            for consumer in consumers:
                decisions.setdefault(consumer, (reason, problem.magnitude))
            continue
        entry = {"constant": name, "values_flushed": problem.flushed, "smallest": float(f"{problem.magnitude:.6g}"),
                 "flushed_share_of_l2_norm": float(f"{problem.flushed_share:.6g}"), "limit": EFFECT_LIMIT}
        roles = _roles(net, name)
        measured = observed is not None and _measurable(problem, roles)
        effects = flush_effects(net, name, consumers, observed) if measured else {}
        kept = []
        for consumer in consumers:
            harmful, measure = _judge(problem, effects.get(consumer), roles[consumer])
            if harmful:
                kept.append(consumer)
                reason = (f"constant {name} flushes to 0 in fp16 ({problem.flushed} value(s), smallest "
                          f"{problem.magnitude:.3g}): {measure}")
                decisions.setdefault(consumer, (reason, problem.magnitude))
            guarded = _guarded_region(net, name, consumer, decisions) if harmful and roles[consumer] == "guard" else []
            entry.setdefault("consumers", []).append(
                {"node": consumer, "measure": measure, "keeps_fp32": harmful,
                 **({"output_change": float(f"{effects[consumer]:.6g}")} if effects.get(consumer) is not None else {}),
                 **({"guarded_readers_kept_fp32": guarded} if guarded else {})})
        entry["decision"] = "consumers kept fp32" if kept == consumers else (
            "converted to fp16" if not kept else "some consumers kept fp32")
        flushing.append(entry)
    if record is not None and low_precision == "fp16":
        record["constants"] = {"flushing": flushing, "effect_limit": EFFECT_LIMIT,
                               "measured": observed is not None}
    return decisions


def _guarded_region(net: Network, constant: str, consumer: str, decisions: dict) -> list[str]:
    """Keep FP32 the nodes between an epsilon's consumer and the singular readers it guards. Decision: the
    consumer alone in FP32 guards nothing, its output cast to fp16 for an fp16 Log loses the epsilon again
    (issue 21: Add(x², 1e-10) FP32, then Log in FP16 read zeros)."""
    from trtpipe.precision.auto.underflow import guarded_readers

    region = guarded_readers(net, consumer)
    for node, what in region:
        decisions.setdefault(node, (f"guarded by constant {constant}: it reads the output of {consumer}, whose "
                                    f"epsilon {constant} flushes to 0 in fp16 ({what}); kept FP32 so the epsilon "
                                    "is not lost at a cast to fp16", None))
    return [node for node, _ in region]


def _roles(net: Network, constant: str) -> dict[str, str]:
    """real consumer -> 'divisor' (it divides by the constant), 'guard' (it adds the constant to what a singular
    reader reads) or '' (linear use: a weight, a bias, a scale)."""
    from trtpipe.precision.auto.underflow import guarded_readers, singular_slot

    views = passthrough_views(net, constant)
    roles = {}
    for consumer in real_consumers(net, constant):
        node = net.nodes[consumer]
        slots = [index for index, tensor in enumerate(node.input) if tensor in views]
        if any(_DIVISOR_SLOTS.get(node.op_type) == i or singular_slot(net, consumer, i) for i in slots):
            roles[consumer] = "divisor"
        elif node.op_type in _GUARDING_OPS and guarded_readers(net, consumer):
            roles[consumer] = "guard"
        else:
            roles[consumer] = ""
    return roles


def _measurable(problem: ConstantProblem, roles: dict[str, str]) -> bool:
    if problem.kind != "flushes" or (problem.small and all(role == "guard" for role in roles.values())):
        return False
    return problem.flushed_share >= MEASURE_FROM or "divisor" in roles.values()


def _judge(problem: ConstantProblem, effect: float | None, role: str) -> tuple[bool, str]:
    if role == "guard" and problem.small:
        return True, (f"an epsilon (≤ {_SMALL_TENSOR} values) added to what a singular reader (Log, a divisor, ...) "
                      "reads: it guards against zeros the samples may not contain, so any flushed value counts")
    if role == "divisor" and effect is None:
        return True, ("the consumer divides by it (a divisor, a variance): its effect is not linear in its values, "
                      "and it was not measured (no sample data or the node could not be run alone)")
    if problem.flushed_share < MEASURE_FROM and role != "divisor":
        return False, (f"the flushed values are {problem.flushed_share:.3g} of its L2 norm < {MEASURE_FROM:g}: "
                       "negligible, not measured")
    if effect is not None:
        verdict = ">=" if effect >= EFFECT_LIMIT else "<"
        return effect >= EFFECT_LIMIT, (f"flushing changes this node's output by {effect:.3g} (relative L2, "
                                        f"measured on the sample inputs) {verdict} {EFFECT_LIMIT:g}")
    verdict = ">=" if problem.flushed_share >= EFFECT_LIMIT else "<"
    return problem.flushed_share >= EFFECT_LIMIT, (
        f"the flushed values are {problem.flushed_share:.3g} of its L2 norm {verdict} {EFFECT_LIMIT:g} "
        "(not measured: no sample data or the node could not be run alone)")
