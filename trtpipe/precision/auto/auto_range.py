"""Automatic rule: activation range, measured by an FP32 reference run.

Every node whose float output exceeds `precision.auto.max_abs` on the sample
inputs stays FP32. For ops that hide an intermediate inside one kernel, the
intermediate counts: LayerNormalization's (x - mean)², RMSNormalization's x²,
ReduceL2's sum of squares. Integer tensors never count.

Decisions:
- The reference run is made once (`observe_reference`) and kept per
  tensor (graph inputs and every float node output), because two rules read it:
  this one per node (`node_max_abs`) and the stored-tensor check
  (`auto_boundaries.py`), which needs the magnitude of tensors an FP32 producer
  hands to an FP16 consumer.
- Body nodes (If/Loop/Scan) are measured like any other: the reference runs a
  copy whose control-flow nodes carry every body tensor out (body_values.py);
  a Loop/Scan body tensor counts over all iterations. A body node the sample
  data never reaches (an If branch not taken) has no measured range: it keeps
  `precision.default`, and the log names it. If the carrying copy cannot run
  (per-iteration shapes that cannot be stacked: an If inside a Loop taking
  both branches, a growing carried state), it is tried without the If branches
  inside Loop/Scan bodies, then the main graph alone is measured; a warning
  says what was not.
- The same run records what FP16 storage loses at the bottom of its range (`losses`,
  underflow.py; body tensors over all their iterations), for the stored-tensor check.
- The same run records the shapes every tensor actually has, per iteration,
  and how often its producer ran (`Network.run_shapes`/`run_counts`), for the
  FLOP share (flop_shapes.py).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field

import numpy as np

from trtpipe.precision.network.body_values import carrying_body_values
from trtpipe.precision.auto.underflow import StorageLoss, UnderflowWatch, storage_loss, underflow_watch
from trtpipe.precision.network.flop_shapes import record_run_shapes
from trtpipe.precision.network.network import Network

log = logging.getLogger(__name__)


@dataclass
class Observed:
    """Largest finite |value| over all sample inputs, from one FP32 reference run."""

    tensors: dict[str, float] = field(default_factory=dict)  # graph inputs and float node outputs (bodies too)
    hidden: dict[str, float] = field(default_factory=dict)  # node -> its hidden intermediate (see above)
    # The largest finite value, signed: tells a tensor that overflows only towards -inf (a mask).
    highest: dict[str, float] = field(default_factory=dict)
    # Values of the tensors asked for (`keep`), one array per sample input: the flush measurement's inputs.
    # Main-graph tensors only (a body value is stacked per iteration, not a node input as such).
    kept: dict[str, list[np.ndarray]] = field(default_factory=dict)
    reached: set[str] = field(default_factory=set)  # body nodes the sample data ran
    # What FP16 storage loses at the bottom of its range (underflow.py): tensors (bodies included) that
    # could lose LOSS_LIMIT or more, and the structural watch (singular readers) they were judged for.
    losses: dict[str, StorageLoss] = field(default_factory=dict)
    watch: UnderflowWatch | None = None
    # Nodes whose out-of-range values only drive a Tanh/Sigmoid into saturation (saturating_chains.py):
    # node -> that Tanh/Sigmoid. Set by the planner; the stored-tensor check tolerates their outputs.
    saturating: dict[str, str] = field(default_factory=dict)


def observe_reference(net: Network, feeds_list: list[dict[str, np.ndarray]], keep: set[str] = frozenset(),
                      inspect=None) -> Observed:
    """Run the FP32 model once per feed dict and keep the per-tensor maxima (and the values of `keep`).
    `inspect(values)`, when given, sees every sample's tensors as they are computed (nothing is kept)."""
    observed = Observed(watch=underflow_watch(net))
    computing = [name for name in net.names if net.computes_float(name)]  # the same for every feed
    for index, values in enumerate(reference_values(net, feeds_list)):
        if index == 0:
            record_run_shapes(net, values)
        if inspect is not None:
            inspect(values)
        for tensor, array in values.items():
            if tensor in keep and not net.run_levels.get(tensor):
                observed.kept.setdefault(tensor, []).append(array)
            if isinstance(array, np.ndarray) and _is_floating(array.dtype):  # not sequences
                lowest, highest = _finite_extremes(array)
                observed.tensors[tensor] = max(observed.tensors.get(tensor, 0.0), -lowest, highest, 0.0)
                observed.highest[tensor] = max(observed.highest.get(tensor, -np.inf), highest)
                if tensor not in net.constants:  # body tensors too, all iterations at once (underflow.py)
                    _record_loss(observed, tensor, array)
        for name in computing:
            if name in net.parent:
                if not any(np.asarray(values[t]).size for t in net.float_outputs(name) if t in values):
                    continue  # not reached by this sample (an If branch not taken, a zero-trip Loop)
                observed.reached.add(name)
            hidden = _hidden_intermediate(net.nodes[name], values, net.run_levels)
            if hidden:
                observed.hidden[name] = max(observed.hidden.get(name, 0.0), hidden)
    unreached = [n for n in net.parent if n not in observed.reached and net.computes_float(n)]
    if unreached:
        log.info("activation range: %d body node(s) without a measured range (not reached by the sample data, "
                 "or not measurable) keep precision.default: %s", len(unreached), ", ".join(unreached[:5]))
    return observed


def _record_loss(observed: Observed, tensor: str, array: np.ndarray) -> None:
    loss = storage_loss(array, observed.watch.functions.get(tensor))
    if loss is not None:
        known = observed.losses.get(tensor)
        observed.losses[tensor] = loss if known is None else known.merge(loss)


def node_max_abs(net: Network, observed: Observed) -> dict[str, float]:
    """node name -> the largest finite |value| of its float outputs or hidden intermediate
    (body nodes the sample data never reached have no entry)."""
    per_node: dict[str, float] = {}
    for name in net.names:
        if not net.computes_float(name) or (name in net.parent and name not in observed.reached):
            continue
        largest = max((observed.tensors.get(t, 0.0) for t in net.float_outputs(name)), default=0.0)
        per_node[name] = max(largest, observed.hidden.get(name, 0.0))
    return per_node


def observed_max_abs(net: Network, feeds_list: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """node name -> the largest finite |value| of its float outputs or hidden intermediates."""
    return node_max_abs(net, observe_reference(net, feeds_list))


def reference_values(net: Network, feeds_list: list[dict[str, np.ndarray]]):
    """Per feed: every float tensor of the FP32 reference by name, body tensors stacked per iteration.

    Yields dicts; a body tensor's value holds all its iterations along leading axes
    (`net.run_levels[tensor]` of them)."""
    from trtpipe.numerics.reference import ReferenceRunner

    carried, runner, first = {}, None, {}
    attempts = [True, False] if net.parent else []
    for ifs_in_repeats in attempts:
        tried = set(carried)
        copy, carried = carrying_body_values(net.model, net.tensor_types, ifs_in_repeats=ifs_in_repeats)
        if not ifs_in_repeats and set(carried) == tried:
            carried = {}
            break  # no If inside a Loop/Scan: the same copy would fail again
        try:
            runner = ReferenceRunner(copy, expose_intermediates=True)
            first = runner.run(feeds_list[0]) if feeds_list else {}
            break
        except Exception as error:  # noqa: BLE001 - any failure (UserError included): measure less
            what = "If branches inside Loop/Scan bodies" if ifs_in_repeats else "bodies of If/Loop/Scan nodes"
            log.warning("activation range: the %s could not be measured (%s); their nodes keep precision.default",
                        what, str(error).splitlines()[0][:200])
            runner = None
    if runner is None:
        carried = {}
        # The network's own shape inference of this very model: the runner need not infer it again.
        runner = ReferenceRunner(net.model, expose_intermediates=True, inferred=net.inferred)
        first = runner.run(feeds_list[0]) if feeds_list else {}
    net.run_levels = {value.tensor: value.levels for value in carried.values()}
    for index, feeds in enumerate(feeds_list):
        outputs = first if index == 0 else runner.run(feeds)
        values = {**feeds, **outputs}
        for outer, value in carried.items():
            if outer in values:
                values[value.tensor] = values.pop(outer)
        yield values


# Ops whose arithmetic is a sum of products accumulated in FP32 inside one kernel (TensorRT's FP16
# GEMM and convolution tactics, and the emulator: emulated_graph.py); only their output is stored in
# FP16. Not the recurrent ops: their gates and states are elementwise FP16 arithmetic.
ACCUMULATING_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})


def range_decisions(observed: dict[str, float], max_abs: float, heavy_max_abs: float | None = None,
                    op_types: dict[str, str] | None = None) -> dict[str, tuple[str, float]]:
    """node -> (reason, value) for the nodes beyond the limit.

    `heavy_max_abs` (precision.auto.heavy_max_abs), when given with `op_types` (node -> op type),
    is the limit of the `ACCUMULATING_OPS` instead of `max_abs`. Decision: max_abs's headroom
    (4096 is 65504 / 16) covers what FP16 *arithmetic* does with large values (x², x + y, then
    the next op's); a MatMul/Conv does that arithmetic in FP32 and only rounds its result, so
    the only hazard left is its stored output leaving FP16's range on larger inputs. A
    transformer's FFN output projection above 4096 is where the FLOPs are (the search keeps it
    FP16 and passes, issue 21), so a recipe can give these nodes their own headroom.
    """
    found = {}
    for name, value in observed.items():
        heavy = heavy_max_abs is not None and op_types is not None and op_types.get(name) in ACCUMULATING_OPS
        limit, key = (heavy_max_abs, "heavy_max_abs") if heavy else (max_abs, "max_abs")
        if value > limit:
            found[name] = (f"activation range: max |value| {value:.4g} > {limit:g} (precision.auto.{key})", value)
    return found


def _finite_max_abs(array) -> float:
    if array is None or not np.issubdtype(np.asarray(array).dtype, np.floating):
        return 0.0
    values = np.abs(np.asarray(array, dtype=np.float64))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


@functools.lru_cache(maxsize=None)
def _is_floating(dtype: np.dtype) -> bool:
    """np.issubdtype(dtype, np.floating), asked once per dtype (it is asked for every tensor of every run)."""
    return bool(np.issubdtype(dtype, np.floating))


_HIDDEN_OPS = frozenset({"LayerNormalization", "RMSNormalization", "ReduceL2"})


def _finite_extremes(array) -> tuple[float, float]:
    """The smallest and largest finite values (+inf, -inf when there are none), in the array's own type."""
    values = np.asarray(array)
    if values.size:  # finite extremes mean every value is finite (NaN and inf propagate): no masked copy
        lowest, highest = float(values.min()), float(values.max())
        if math.isfinite(lowest) and math.isfinite(highest):
            return lowest, highest
    finite = values[np.isfinite(values)]
    if not finite.size:
        return np.inf, -np.inf
    return float(finite.min()), float(finite.max())


def _hidden_intermediate(node, values: dict, levels: dict[str, int]) -> float:
    if node.op_type not in _HIDDEN_OPS:
        return 0.0  # before any conversion: most nodes compute nothing hidden
    x = values.get(node.input[0]) if node.input else None
    stacked = levels.get(node.input[0], 0) if node.input else 0  # leading iteration axes of a body value
    if x is None or not np.issubdtype(np.asarray(x).dtype, np.floating):
        return 0.0
    x = np.asarray(x, dtype=np.float64)
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        axes = tuple(range(axis % (x.ndim - stacked) + stacked, x.ndim))
        centred = x - x.mean(axis=axes, keepdims=True) if node.op_type == "LayerNormalization" else x
        return _finite_max_abs(centred**2)
    if node.op_type == "ReduceL2":
        out = values.get(node.output[0])
        return _finite_max_abs(None if out is None else np.asarray(out, dtype=np.float64) ** 2)
    return 0.0
