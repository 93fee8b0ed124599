"""The measured effect of FP16's flush-to-zero of one constant on the nodes that read it.

For each real consumer of the constant, the consumer alone is run in ONNX
Runtime twice per sample input: on its inputs as the FP32 reference run saw
them, and with the constant's flushed values set to 0. The effect is the
relative L2 change of its float outputs, the largest over the sample inputs.

Decisions:
- Only the flush is measured, not FP16's ordinary rounding of the weight:
  the rounding is the price of FP16 everywhere, the flush is what this rule
  is about (auto_constants.py compares the effect with its limit).
- A consumer may read the constant through data-movement ops (Transpose,
  Reshape, ... see passthrough.py): those move values without changing them,
  so the tensor it reads is flushed the same way (values below the flush
  threshold set to 0), from the reference run's copy of it.
- A consumer whose inputs the reference run did not keep (an integer tensor
  computed at run time), or that ONNX Runtime cannot run alone, has no
  measured effect (None): the caller falls back to the magnitude criterion.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper

from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.network.network import Network
from trtpipe.precision.network.passthrough import passthrough_views

log = logging.getLogger(__name__)


def flush_effects(net: Network, constant: str, consumers: list[str], observed) -> dict[str, float | None]:
    """consumer -> relative L2 change of its float outputs when `constant` is flushed (None: not measured)."""
    from trtpipe.precision.auto.auto_constants import FLUSH_THRESHOLD

    flushed_views = _views_of(net, constant)
    effects: dict[str, float | None] = {}
    for consumer in consumers:
        node = net.nodes[consumer]
        try:
            effects[consumer] = _effect(net, node, flushed_views, observed, FLUSH_THRESHOLD)
        except Exception as error:  # ONNX Runtime cannot run the node alone: not measurable
            log.info("flush effect of %s on %s not measured: %s", constant, consumer, str(error).splitlines()[0])
            effects[consumer] = None
    return effects


def _views_of(net: Network, constant: str) -> set[str]:
    """The constant and every tensor that holds its values moved by passthrough ops."""
    return passthrough_views(net, constant)


def _effect(net: Network, node: onnx.NodeProto, views: set[str], observed, threshold: float) -> float | None:
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None  # a body may read outer tensors the single-node model does not have
    per_feed = _inputs_per_feed(net, node, observed)
    if per_feed is None:
        return None
    session = _single_node_session(net, node, per_feed[0])
    worst = 0.0
    for inputs in per_feed:
        flushed = {name: _flush(array, threshold) if name in views else array for name, array in inputs.items()}
        before, after = session.run(inputs), session.run(flushed)
        for name, reference in before.items():
            reference = np.asarray(reference)
            if not np.issubdtype(reference.dtype, np.floating):
                continue
            reference = reference.astype(np.float64)
            change = np.linalg.norm(np.asarray(after[name], dtype=np.float64) - reference)
            scale = np.linalg.norm(reference)
            worst = max(worst, float(change / scale) if scale > 0 else float(change > 0))
    return worst


def _inputs_per_feed(net: Network, node: onnx.NodeProto, observed) -> list[dict[str, np.ndarray]] | None:
    """The node's inputs as the reference run saw them, one dict per sample input; None if any is missing."""
    feeds = max((len(observed.kept.get(t, ())) for t in node.input if t), default=0) or 1
    per_feed: list[dict[str, np.ndarray]] = [{} for _ in range(feeds)]
    for name in dict.fromkeys(t for t in node.input if t):
        if name in observed.kept:
            arrays = observed.kept[name]
        elif name in net.constants:
            arrays = [tensor_array(net.constants[name])] * feeds
        else:
            return None
        if len(arrays) != feeds:
            return None
        for inputs, array in zip(per_feed, arrays):
            inputs[name] = np.asarray(array)
    return per_feed


def _flush(array: np.ndarray, threshold: float) -> np.ndarray:
    if not np.issubdtype(array.dtype, np.floating):
        return array
    return np.where(np.abs(array) < threshold, np.zeros((), array.dtype), array)


def _single_node_session(net: Network, node: onnx.NodeProto, inputs: dict[str, np.ndarray]):
    from trtpipe.numerics.ort_session import OrtSession

    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
                    for name, array in inputs.items()]
    outputs = [onnx.ValueInfoProto(name=name) for name in node.output if name]
    alone = onnx.NodeProto()
    alone.CopyFrom(node)
    graph = helper.make_graph([alone], "flush_effect", graph_inputs, outputs)
    model = helper.make_model(graph, opset_imports=list(net.model.opset_import), ir_version=net.model.ir_version)
    return OrtSession(model, graph=f"node {node.name or node.op_type} alone, to measure a constant's flush")

