"""Automatic rule: activation range, measured by an FP32 reference run.

Every node whose float output exceeds `precision.auto.max_abs` on the sample
inputs stays FP32. For ops that hide an intermediate inside one kernel, the
intermediate counts: LayerNormalization's (x - mean)², RMSNormalization's x²,
ReduceL2's sum of squares. Integer tensors never count.

Decision: the reference run is made once (`observe_reference`) and kept per
tensor (graph inputs and every float node output), because two rules read it:
this one per node (`node_max_abs`) and the stored-tensor check
(`auto_boundaries.py`), which needs the magnitude of tensors an FP32 producer
hands to an FP16 consumer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtpipe.precision.network import Network


@dataclass
class Observed:
    """Largest finite |value| over all sample inputs, from one FP32 reference run."""

    tensors: dict[str, float] = field(default_factory=dict)  # graph inputs and float node outputs
    hidden: dict[str, float] = field(default_factory=dict)  # node -> its hidden intermediate (see above)
    # The largest finite value, signed: tells a tensor that overflows only towards -inf (a mask).
    highest: dict[str, float] = field(default_factory=dict)
    # Values of the tensors asked for (`keep`), one array per sample input: the flush measurement's inputs.
    kept: dict[str, list[np.ndarray]] = field(default_factory=dict)


def observe_reference(net: Network, feeds_list: list[dict[str, np.ndarray]], keep: set[str] = frozenset()) -> Observed:
    """Run the FP32 model once per feed dict and keep the per-tensor maxima (and the values of `keep`)."""
    from trtpipe.numerics.reference import ReferenceRunner

    runner = ReferenceRunner(net.model, expose_intermediates=True)
    observed = Observed()
    for feeds in feeds_list:
        values = {**feeds, **runner.run(feeds)}
        for tensor, array in values.items():
            if tensor in keep:
                observed.kept.setdefault(tensor, []).append(array)
            if isinstance(array, np.ndarray) and np.issubdtype(array.dtype, np.floating):  # not sequences
                lowest, highest = _finite_extremes(array)
                observed.tensors[tensor] = max(observed.tensors.get(tensor, 0.0), -lowest, highest, 0.0)
                observed.highest[tensor] = max(observed.highest.get(tensor, -np.inf), highest)
        for name in net.names:
            if net.computes_float(name):
                hidden = _hidden_intermediate(net.nodes[name], values)
                if hidden:
                    observed.hidden[name] = max(observed.hidden.get(name, 0.0), hidden)
    return observed


def node_max_abs(net: Network, observed: Observed) -> dict[str, float]:
    """node name -> the largest finite |value| of its float outputs or hidden intermediate."""
    per_node: dict[str, float] = {}
    for name in net.names:
        if not net.computes_float(name):
            continue
        largest = max((observed.tensors.get(t, 0.0) for t in net.float_outputs(name)), default=0.0)
        per_node[name] = max(largest, observed.hidden.get(name, 0.0))
    return per_node


def observed_max_abs(net: Network, feeds_list: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """node name -> the largest finite |value| of its float outputs or hidden intermediates."""
    return node_max_abs(net, observe_reference(net, feeds_list))


def range_decisions(observed: dict[str, float], max_abs: float) -> dict[str, tuple[str, float]]:
    return {
        name: (f"activation range: max |value| {value:.4g} > {max_abs:g} (precision.auto.max_abs)", value)
        for name, value in observed.items()
        if value > max_abs
    }


def _finite_max_abs(array) -> float:
    if array is None or not np.issubdtype(np.asarray(array).dtype, np.floating):
        return 0.0
    values = np.abs(np.asarray(array, dtype=np.float64))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def _finite_extremes(array) -> tuple[float, float]:
    """The smallest and largest finite values (+inf, -inf when there are none), in the array's own type."""
    values = np.asarray(array)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return np.inf, -np.inf
    return float(finite.min()), float(finite.max())


def _hidden_intermediate(node, values: dict) -> float:
    x = values.get(node.input[0]) if node.input else None
    if x is None or not np.issubdtype(np.asarray(x).dtype, np.floating):
        return 0.0
    x = np.asarray(x, dtype=np.float64)
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        axes = tuple(range(axis % x.ndim, x.ndim))
        centred = x - x.mean(axis=axes, keepdims=True) if node.op_type == "LayerNormalization" else x
        return _finite_max_abs(centred**2)
    if node.op_type == "ReduceL2":
        out = values.get(node.output[0])
        return _finite_max_abs(None if out is None else np.asarray(out, dtype=np.float64) ** 2)
    return 0.0
