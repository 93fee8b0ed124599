"""Normalization groups and Softmax kept FP32 only where the evidence requires it.

A group (norm_groups.py: a fused or decomposed LayerNorm/RMSNorm, a Softmax) is
one computation: when any of its members must be FP32, the whole group is, so no
Cast splits its statistics. Whether one must is measured, not assumed:

- range: a member's output, or the hidden intermediate of a fused norm
  ((x - E[x])² of LayerNormalization, x² of RMSNormalization: auto_range.py),
  exceeds `precision.auto.max_abs` in the FP32 reference run (the x² of a T5
  RMSNorm, the variance of NAFNet's LayerNorm2d);
- statistics: a variance written as E[x²] - E[x]² (layernorm_groups.py, the
  "moment difference") loses in FP16 what the output needs when the mean is
  large against the spread. Each FP16 moment carries a rounding error of up to
  2^-11 of E[x²], so the variance's relative error is up to
  2 * 2^-11 * E[x²] / Var; the group stays FP32 when that exceeds
  `STATISTICS_LIMIT` = 2^-8 (the normalised output then moves by more than
  0.2%, four times FP16's own rounding), measured on every row of the
  reference run.

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

import numpy as np

from trtpipe.errors import UserError
from trtpipe.precision.auto_range import Observed
from trtpipe.precision.layernorm_groups import moment_difference
from trtpipe.precision.network import Network

PROTECT_MODES = ("evidence", "always")
ROUNDING = 2.0**-11  # FP16's relative rounding error (half an ulp)
STATISTICS_LIMIT = 2.0**-8


def moment_tensors(net: Network) -> dict[str, tuple[str, str]]:
    """Variance node of each E[x²] - E[x]² -> (the E[x²] tensor, the variance tensor): kept by the reference run."""
    found = {}
    for name in net.names:
        node = net.nodes[name]
        if node.op_type == "Sub" and len(node.input) == 2 and moment_difference(net, name) is not None:
            found[name] = (node.input[0], node.output[0])
    return found


def group_decisions(net: Network, groups: dict[str, str], range_found: dict[str, tuple[str, float]],
                    observed: Observed | None, protect: str) -> dict[str, tuple[str, float | None]]:
    """node -> (reason, magnitude) for the members of every group that must stay FP32."""
    if protect not in PROTECT_MODES:
        raise UserError(f"precision.auto.protect={protect!r} is not one of {', '.join(PROTECT_MODES)}",
                        "precision.auto.protect=evidence")
    members: dict[str, list[str]] = {}
    for name, label in groups.items():
        members.setdefault(label, []).append(name)
    moments = moment_tensors(net) if observed is not None and protect == "evidence" else {}
    found: dict[str, tuple[str, float | None]] = {}
    for label, names in members.items():
        why = _evidence(names, range_found, moments, observed, protect)
        if why is None:
            continue
        for name in names:
            found[name] = (f"normalization group: {label}: {why}", range_found.get(name, (None, None))[1])
    return found


def _evidence(names: list[str], range_found: dict, moments: dict, observed: Observed | None,
              protect: str) -> str | None:
    if protect == "always":
        return "kept FP32 whatever its range (precision.auto.protect=always)"
    if observed is None:
        return "no FP32 reference run, so no evidence that FP16 is safe (precision.auto.max_abs is null or no samples)"
    for name in names:
        if name in range_found:
            return f"member {name}: {range_found[name][0]}"
    for name in names:
        if name in moments:
            error = statistics_error(observed, *moments[name])
            if error > STATISTICS_LIMIT:
                return (f"E[x^2] - E[x]^2 at {name}: FP16 moments give the variance a relative error up to "
                        f"{error:.3g} > {STATISTICS_LIMIT:g} (large mean against the spread)")
    return None


def statistics_error(observed: Observed, second_moment: str, variance: str) -> float:
    """Worst relative error of an FP16 E[x²] - E[x]² over the reference rows: 2 * 2^-11 * E[x²] / Var."""
    worst = 0.0
    for moment, var in zip(observed.kept.get(second_moment, []), observed.kept.get(variance, [])):
        moment = np.abs(np.asarray(moment, dtype=np.float64))
        var = np.asarray(var, dtype=np.float64)
        if moment.shape != var.shape:
            moment = np.broadcast_to(moment.max(), var.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(var > 0, moment / np.where(var > 0, var, 1.0), np.where(moment > 0, np.inf, 0.0))
        if ratio.size:
            worst = max(worst, float(np.max(ratio)))
    return 2.0 * ROUNDING * worst
