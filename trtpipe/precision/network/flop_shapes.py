"""The shapes the sample data actually gives every tensor, for the FLOP share (issue 12, item 5).

Counting unknown dimensions as 1 made the share wrong wherever dimensions are
dynamic: a node whose FLOPs scale with a dynamic sequence length weighed as if
the sequence had length 1 next to a fixed-size projection. Decisions, in order
of preference (a later source fills only what an earlier one left unknown):

1. the FP32 reference run of the range rule records every float tensor's real
   shape; a body tensor (carried out per iteration, body_values.py) is recorded
   per iteration, with how many times its producer ran (Loop/Scan trips
   multiplied over nesting; 0 for an If branch the sample did not take);
2. otherwise ONNX shape inference on a copy whose graph inputs have the sample
   feeds' concrete shapes (data propagation on, so Reshape targets computed
   from shapes resolve too);
3. the model's own static shapes; what is still unknown counts as 1, and the
   plan's totals say how many FLOP-bearing nodes had an unknown dimension.

A body node without a recorded run count repeats as often as its Loop's
constant trip count or its Scan's known sequence length says, else once.
"""

from __future__ import annotations

import logging
from math import prod

import numpy as np
import onnx

from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.onnxmodel.value_info import weightless_copy
from trtpipe.precision.network.network import Network

log = logging.getLogger(__name__)


def record_run_shapes(net: Network, values: dict[str, np.ndarray]) -> None:
    """Shapes (per iteration) and run counts of every produced tensor of one reference run."""
    for tensor, array in values.items():
        if not isinstance(array, np.ndarray):
            continue  # a sequence or a map: no shape to record
        shape = list(array.shape)
        if tensor not in net.producer:  # a graph input: fed as it is
            net.run_shapes[tensor] = shape
            continue
        levels = net.run_levels.get(tensor, 0)
        net.run_shapes[tensor] = shape[levels:]
        net.run_counts[tensor] = prod(shape[:levels])
        if net.producer[tensor] in net.parent and shape[levels:] == [0]:
            net.run_counts[tensor] = 0  # an If branch not taken carries an empty value out


def record_feed_shapes(net: Network, feeds: dict[str, np.ndarray] | None) -> int:
    """Fill `net.run_shapes` by shape inference with the feeds' concrete input shapes; returns how many."""
    if not feeds:
        return 0
    for name, array in feeds.items():
        if isinstance(array, np.ndarray):
            net.run_shapes.setdefault(name, list(array.shape))
    copy = weightless_copy(net.model)
    for value in copy.graph.input:
        if isinstance(feeds.get(value.name), np.ndarray) and value.type.HasField("tensor_type"):
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in feeds[value.name].shape:
                shape.dim.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception as error:  # noqa: BLE001 - the static shapes remain; say why
        log.info("FLOP share: shape inference with the sample shapes failed (%s); static shapes used", error)
        return 0
    added = 0
    for graph in all_graphs(inferred.graph):
        for value in [*graph.value_info, *graph.output]:
            dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
            if value.name in net.run_shapes or not dims:
                continue
            if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
                net.run_shapes[value.name] = [d.dim_value for d in dims]
                added += 1
    return added


def feeds_for_shapes(model: onnx.ModelProto, config) -> dict[str, np.ndarray] | None:
    """One sample feed for the shapes alone, when no automatic rule needed the data.

    Decision: its absence must not stop a stage that did not need data before, so a
    data block that cannot describe the inputs leaves the model's static shapes (logged)."""
    from trtpipe.data import sample_feeds
    from trtpipe.errors import UserError

    if config["default"] == "fp32":
        return None
    try:
        feeds = sample_feeds(model, {**config["data"], "iterations": 1})
    except Exception as error:  # noqa: BLE001 - UserError or not: the figure falls back, the stage goes on
        kind = "" if isinstance(error, UserError) else f"{type(error).__name__}: "
        log.info("FLOP share: no sample shapes (%s%s); the model's static shapes are used", kind, error)
        return None
    return feeds[0] if feeds else None


def known_shape(net: Network, tensor: str) -> list[int | None] | None:
    """The best shape known for `tensor`: recorded, else static (None for unknown dims)."""
    if tensor in net.run_shapes:
        return list(net.run_shapes[tensor])
    return net.tensor_shapes.get(tensor)


def times_run(net: Network, name: str) -> int:
    """How many times node `name` runs for one sample: 1 in the main graph, trips inside bodies."""
    outputs = [t for t in net.nodes[name].output if t]
    if outputs and outputs[0] in net.run_counts:
        return net.run_counts[outputs[0]]
    count, current = 1, name
    while current in net.parent:
        current = net.parent[current]
        count *= _static_trips(net, current)
    return count


def _static_trips(net: Network, control: str) -> int:
    node = net.nodes[control]
    if node.op_type == "Loop" and node.input and node.input[0] in net.constants:
        from trtpipe.onnxmodel.weights_on_disk import tensor_array

        return max(int(np.asarray(tensor_array(net.constants[node.input[0]])).ravel()[0]), 0)
    if node.op_type == "Scan":
        states = len(node.input) - next(a.i for a in node.attribute if a.name == "num_scan_inputs")
        axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), [0])
        shape = known_shape(net, node.input[states]) if states < len(node.input) else None
        if shape and shape[axes[0] if axes else 0]:
            return int(shape[axes[0] if axes else 0])
    return 1
