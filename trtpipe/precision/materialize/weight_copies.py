"""Store weights in the types weight_types.py chose: convert in place or add typed copies.

Initializer copies follow their original in the initializer list; Constant
copies are new Constant nodes placed right after the original, named
`<constant node>/<fp16|...>`. Everything converted and everything clipped is
reported (see weights.py for the clipping rule).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.onnxmodel.weights_on_disk import tensor_nbytes
from trtpipe.precision.network.batched_threads import map_in_batches
from trtpipe.precision.network.element_types import short_name
from trtpipe.precision.network.graph_index import GraphIndex, UniqueNames
from trtpipe.precision.materialize.weight_types import WeightTypes
from trtpipe.precision.materialize.weights import LARGEST_FINITE, convert_tensor

_THREADS = 2


@dataclass
class StoredWeights:
    # The new initializer list, or None when the graph's own list was edited in place.
    initializers: list[onnx.TensorProto] | None
    # Constant nodes to add right after the node at a position of the graph.
    constants_after: dict[int, list[onnx.NodeProto]] = field(default_factory=dict)
    initializers_converted: list[str] = field(default_factory=list)
    constants_converted: list[str] = field(default_factory=list)
    saturated: list[dict] = field(default_factory=list)


def store_weights(
    graph: onnx.GraphProto, index: GraphIndex, weights: WeightTypes, names: UniqueNames
) -> StoredWeights:
    """Apply `weights.copies`; edits Constant nodes of `graph` in place, returns the rest."""
    replaced: dict[str, onnx.TensorProto] = {}
    added_after: dict[str, list[onnx.TensorProto]] = {}
    stored = StoredWeights(initializers=[])
    # Decision: initializers are converted on two threads (reading a weight from disk and
    # NumPy's conversions release the GIL), in batches (batched_threads.py); results are used
    # in the plan's order.
    copies = [copy for copy in weights.copies if copy[0] not in weights.constant_nodes]
    # A weight converted under its own name, and used by no other copy, is rewritten in place.
    uses = Counter(source for source, _, _ in copies)
    in_place = [name == source and uses[source] == 1 for source, _, name in copies]

    def convert(job):
        (source, elem_type, name), overwrite = job
        return convert_tensor(graph.initializer[index.initializers[source]], elem_type, name, in_place=overwrite)

    def size(job):
        return tensor_nbytes(graph.initializer[index.initializers[job[0][0]]])

    conversions = iter(map_in_batches(convert, list(zip(copies, in_place)), size, _THREADS))
    for source, elem_type, name in weights.copies:
        if source in weights.constant_nodes:
            _store_constant(graph, weights.constant_nodes[source], elem_type, name, names, stored)
            continue
        converted = next(conversions)
        _note_saturation(stored, name, source, elem_type, converted.saturated_max_abs)
        stored.initializers_converted.append(name)
        if name == source:
            replaced[source] = converted.tensor
        else:
            added_after.setdefault(source, []).append(converted.tensor)
    if all(in_place) and not added_after:
        stored.initializers = None  # graph.initializer already holds the result
        return stored
    for tensor in graph.initializer:
        stored.initializers.append(replaced.get(tensor.name, tensor))
        stored.initializers.extend(added_after.get(tensor.name, ()))
    return stored


def _store_constant(graph, position, elem_type, name, names: UniqueNames, stored: StoredWeights) -> None:
    node = graph.node[position]
    value = _constant_value(node)
    converted = convert_tensor(value, elem_type, value.name)
    _note_saturation(stored, name, node.output[0], elem_type, converted.saturated_max_abs)
    stored.constants_converted.append(name)
    if name == node.output[0]:
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", converted.tensor))
        return
    copy = helper.make_node(
        "Constant", [], [name], name=names.claim(f"{node.name}/{short_name(elem_type)}"),
        value=converted.tensor,
    )
    stored.constants_after.setdefault(position, []).append(copy)


def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto:
    """The Constant's value as a tensor, whichever float attribute holds it."""
    attribute = node.attribute[0]
    if attribute.name == "value":
        return attribute.t
    if attribute.name == "value_float":
        return numpy_helper.from_array(np.array(attribute.f, dtype=np.float32), "")
    return numpy_helper.from_array(np.array(attribute.floats, dtype=np.float32), "")


def _note_saturation(stored: StoredWeights, name, source, elem_type, max_abs) -> None:
    if max_abs is None:
        return
    stored.saturated.append(
        {
            "tensor": name,
            "source": source,
            "to": short_name(elem_type),
            "max_abs": max_abs,
            "clipped_to": LARGEST_FINITE[elem_type],
        }
    )
