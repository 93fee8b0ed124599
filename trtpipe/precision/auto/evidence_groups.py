"""Normalization groups and Softmax kept FP32 only where the evidence requires it.

A group (norm_groups.py: a fused or decomposed LayerNorm/RMSNorm, a Softmax) is
one computation: when any of its members must be FP32, the whole group is, so no
Cast splits its statistics. Whether one must is measured, not assumed:

- range: a member's output, or the hidden intermediate of a fused norm
  ((x - E[x])² of LayerNormalization, x² of RMSNormalization: auto_range.py),
  exceeds `precision.auto.max_abs` in the FP32 reference run (the x² of a T5
  RMSNorm, the variance of NAFNet's LayerNorm2d);
- statistics: FP16 loses what the normalised output needs when the mean is
  large against the spread, r = E[x²] / Var = 1 + E[x]² / Var per row. A
  variance written as E[x²] - E[x]² (layernorm_groups.py, "moment difference")
  rounds both moments by up to 2^-11 of E[x²]: the output's relative error is
  up to 2 * 2^-11 * r. x - E[x] (the centred forms, a fused LayerNormalization)
  rounds x by 2^-11 of |x|: up to 2^-11 * sqrt(r). The group stays FP32 when
  that exceeds `STATISTICS_LIMIT` = 2^-8 (four times FP16's own rounding of
  the output), over every row of the reference run.

Decisions:
- A fused `LayerNormalization` whose input fits needs no FP32 I/O. What
  TensorRT computes it in was checked in its documentation, and the
  documentation does NOT promise FP32 statistics under strong typing:
  NVIDIA/TensorRT include/NvInfer.h (10.12-10.16), INormalizationLayer::
  setComputePrecision: "The compute precision defaults to DataType::kFLOAT32
  ... Strongly typed network rejects calls to this method since the compute
  precision is typically controlled by casting the input tensors to the desired
  type" (deprecated in 10.16, removed in 11.0; the 11.x migration guide,
  .agents/skills/trt-strong-typing-migration/SKILL.md, says "compute precision
  follows input dtypes"). The ONNX parser set it from `stash_type` (FP32) only
  for weakly typed networks (onnx/onnx-tensorrt onnxOpImporters.cpp,
  LayerNormalization). So an FP16 LayerNormalization is planned, and emulated
  (numerics/emulated_graph.py), as computing its statistics in FP16: its
  (x - E[x])² must fit, which is what the range rule's hidden intermediate
  measures. Were the GPU to compute in FP32 anyway, the plan is merely safe.
- Without a reference run (`precision.auto.max_abs: null`, no sample inputs)
  there is no evidence either way: groups stay FP32, as before, and say so.
- `precision.auto.protect: always` restores whole groups FP32 whatever their
  ranges (the behaviour before issue 16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtpipe.errors import UserError
from trtpipe.precision.auto.auto_range import Observed
from trtpipe.precision.auto.layernorm_groups import PASSTHROUGH, VARIANCE_FORMS
from trtpipe.precision.network.network import Network

PROTECT_MODES = ("evidence", "always")
# Ops a VARIANCE_FORMS anchor can be: E[.] (ReduceMean, tf2onnx's GlobalAveragePool, ReduceSum * or / N), a difference.
VARIANCE_ANCHORS = frozenset({"Sub", "ReduceMean", "GlobalAveragePool", "Mul", "Div"})
ROUNDING = 2.0**-11  # FP16's relative rounding error (half an ulp)
STATISTICS_LIMIT = 2.0**-8


@dataclass(frozen=True)
class Moments:
    """Where a LayerNorm's E[x] and variance can be read (or its input x, for a fused node)."""

    form: str  # a layernorm_groups.VARIANCE_FORMS name, or "fused"
    tensors: tuple[str, ...]  # (E[x], variance), or (x,) for a fused LayerNormalization
    axis: int = -1


def moment_tensors(net: Network) -> dict[str, Moments]:
    """Node computing a LayerNorm's statistics -> the tensors its evidence reads (kept by the reference run)."""
    found = {}
    for name in net.names:
        node = net.nodes[name]
        if node.op_type == "LayerNormalization" and node.input:
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            found[name] = Moments("fused", (node.input[0],), axis)
            continue
        for form, statistics in VARIANCE_FORMS.items():
            stats = statistics(net, name) if node.op_type in VARIANCE_ANCHORS else None
            mean = stats and next((n for n in stats.mean_nodes if net.op_type(n) not in PASSTHROUGH), None)
            if mean:
                found[name] = Moments(form, (net.nodes[mean].output[0], node.output[0]))
                break
    return found


def group_decisions(net: Network, groups: dict[str, str], range_found: dict[str, tuple[str, float]],
                    observed: Observed | None, protect: str,
                    moments: dict[str, Moments] | None = None) -> dict[str, tuple[str, float | None]]:
    """node -> (reason, magnitude) for the members of every group that must stay FP32.
    `moments`: moment_tensors(net) when the caller has it already (the planner does)."""
    if protect not in PROTECT_MODES:
        raise UserError(f"precision.auto.protect={protect!r} is not one of {', '.join(PROTECT_MODES)}",
                        "precision.auto.protect=evidence")
    members: dict[str, list[str]] = {}
    for name, label in groups.items():
        members.setdefault(label, []).append(name)
    if observed is None or protect != "evidence":
        moments = {}
    elif moments is None:
        moments = moment_tensors(net)
    found: dict[str, tuple[str, float | None]] = {}
    for label, names in members.items():
        why = _unmeasured(net, names) or _evidence(names, range_found, moments, observed, protect)
        if why is None:
            continue
        for name in names:
            found[name] = (f"normalization group: {label}: {why}", range_found.get(name, (None, None))[1])
    return found


# Fused normalizations whose hidden (x - E[x])^2 neither the range rule (auto_range.py: LayerNormalization,
# RMSNormalization) nor the emulator (low_precision_norm.py: LayerNormalization) measures.
UNMEASURED_NORMS = frozenset({"InstanceNormalization", "GroupNormalization"})


def _unmeasured(net: Network, names: list[str]) -> str | None:
    """Decision: no evidence is no proof of safety. Under strong typing TensorRT computes a
    normalization in its input's type (low_precision_norm.py), so a fused Instance/GroupNorm
    whose statistics cannot be measured here stays FP32 with its group, as before issue 16."""
    fused = next((n for n in names if net.op_type(n) in UNMEASURED_NORMS), None)
    if fused is None:
        return None
    return (f"fused {net.op_type(fused)}: its internal (x - E[x])^2 is not measured by the reference run "
            "nor emulated in FP16, so FP16 is not shown safe")


def _evidence(names: list[str], range_found: dict, moments: dict, observed: Observed | None,
              protect: str) -> str | None:
    if protect == "always":
        return "kept FP32 whatever its range (precision.auto.protect=always)"
    if observed is None:
        return ("no FP32 reference run, so no evidence that FP16 is safe (it runs for precision.default=fp16 with "
                "precision.auto.max_abs set and sample inputs)")
    for name in names:
        if name in range_found:
            return f"member {name}: {range_found[name][0]}"
    for name in names:
        if name in moments:
            error = statistics_error(observed, moments[name])
            if error > STATISTICS_LIMIT:
                what = "E[x^2] - E[x]^2" if moments[name].form == "moment difference" else "x - E[x]"
                return (f"{what} at {name}: FP16 statistics give the normalised output a relative error up to "
                        f"{error:.3g} > {STATISTICS_LIMIT:g} (mean large against the spread)")
    return None


def statistics_error(observed: Observed, moments: Moments) -> float:
    """Worst relative error FP16 gives the normalised output over the reference rows, from r = E[x²] / Var:
    2 * 2^-11 * r for E[x²] - E[x]² (both moments rounded), 2^-11 * sqrt(r) for x - E[x] (x rounded)."""
    worst = 0.0
    for arrays in zip(*(observed.kept.get(t, []) for t in moments.tensors)):
        worst = max(worst, _worst_ratio(moments, [np.asarray(a, dtype=np.float64) for a in arrays]))
    if moments.form == "moment difference":
        return 2.0 * ROUNDING * worst
    return ROUNDING * float(np.sqrt(worst))


def _worst_ratio(moments: Moments, arrays: list[np.ndarray]) -> float:
    """max over rows of E[x²] / Var = 1 + E[x]² / Var."""
    if moments.form == "fused":
        x = arrays[0]
        if x.ndim == 0:
            return 1.0
        axes = tuple(range(moments.axis % x.ndim, x.ndim))
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = arrays
        if mean.shape != var.shape:
            try:
                mean, var = np.broadcast_arrays(mean, var)
            except ValueError:
                mean, var = np.full(var.shape, np.abs(mean).max() if mean.size else 0.0), var
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(var > 0, 1.0 + mean**2 / np.where(var > 0, var, 1.0), np.where(mean != 0, np.inf, 1.0))
    ratio = ratio[~np.isnan(ratio)]
    return float(ratio.max()) if ratio.size else 1.0
