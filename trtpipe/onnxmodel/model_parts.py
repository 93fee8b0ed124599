"""The parts of a ModelProto: every tensor it holds, and copies that leave the weights out.

Copying a model with `CopyFrom` copies every weight; on a 2 GB model that is
gigabytes, and seconds, only to drop them again. These helpers copy field by
field instead, so a caller decides what happens to each tensor.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import TensorProto

_DATA_FIELDS = frozenset(
    {"raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data",
     "external_data", "data_location"}
)


def without_data(tensor: TensorProto) -> TensorProto:
    """A new TensorProto with `tensor`'s name, type, dims and metadata, and no values."""
    copy = TensorProto()
    for field, value in tensor.ListFields():
        if field.name not in _DATA_FIELDS:
            _copy_field(copy, field, value)
    return copy


def model_without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose main graph has no initializers (everything else is copied).

    Decision: built field by field, because `CopyFrom` would copy every weight
    (gigabytes) only for the caller to drop them again.
    """
    copy = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == "graph":
            continue
        _copy_field(copy, field, value)
    for field, value in model.graph.ListFields():
        if field.name != "initializer":
            _copy_field(copy.graph, field, value)
    return copy


def _copy_field(target, field, value) -> None:
    # protobuf 7 has only `is_repeated`; older releases only `label`.
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    if repeated:
        getattr(target, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(target, field.name).CopyFrom(value)
    else:
        setattr(target, field.name, value)


def all_tensors(model: onnx.ModelProto, *, initializers: bool = True) -> Iterator[TensorProto]:
    """Initializers and tensor attributes of every graph and subgraph, in file order.

    `initializers=False` leaves out the main graph's initializers (not those of subgraphs).
    """
    yield from _graph_tensors(model.graph, initializers=initializers)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node)


def _graph_tensors(graph: onnx.GraphProto, *, initializers: bool = True) -> Iterator[TensorProto]:
    if initializers:
        yield from graph.initializer
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node: onnx.NodeProto) -> Iterator[TensorProto]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("g"):
            yield from _graph_tensors(attribute.g)
        for subgraph in attribute.graphs:
            yield from _graph_tensors(subgraph)


