"""Automatic rule: activation range, measured by an FP32 reference run.

Every node whose float output exceeds `precision.auto.max_abs` on the sample
inputs stays FP32. For ops that hide an intermediate inside one kernel, the
intermediate counts: LayerNormalization's (x - mean)², RMSNormalization's x²,
ReduceL2's sum of squares. Integer tensors never count.
"""

from __future__ import annotations

import numpy as np

from trtpipe.precision.network import Network


def observed_max_abs(net: Network, feeds_list: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """node name -> the largest finite |value| of its float outputs or hidden intermediates."""
    from trtpipe.numerics.reference import ReferenceRunner

    runner = ReferenceRunner(net.model, expose_intermediates=True)
    per_node: dict[str, float] = {}
    for feeds in feeds_list:
        values = {**feeds, **runner.run(feeds)}
        for name in net.names:
            if not net.computes_float(name):
                continue
            largest = max((_finite_max_abs(values.get(t)) for t in net.float_outputs(name)), default=0.0)
            largest = max(largest, _hidden_intermediate(net.nodes[name], values))
            per_node[name] = max(per_node.get(name, 0.0), largest)
    return per_node


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
