"""The model `gs.export_onnx(graph.cleanup().toposort())` writes, built on the ModelProto directly.

LayerNorm fusion used to import the model into onnx-graphsurgeon, edit, clean
up, sort and export it (~0.5 s of a 48-layer encoder's 0.85 s fusion). The
edit itself is small (a few nodes out, one node in per LayerNorm); this module
writes what that round trip writes, from the edited node list:

- nodes: graphsurgeon's cleanup + toposort order (`gs_order`), each node as
  graphsurgeon exports it: `make_node(op, inputs, outputs, name, domain)` plus
  its attributes re-made by `make_attribute` (doc strings and other node fields
  dropped). A node already in that form is kept as it is (checked field by field).
- initializers and value_info: in the order graphsurgeon's `Graph.tensors()`
  walks them (graph inputs, each node's inputs then outputs, graph outputs);
  initializers nobody reads are dropped; value_info only for tensors with a
  type or shape, re-made by `make_tensor_value_info`, never for graph inputs,
  outputs or initializers.
- graph inputs: without initializers; inputs and outputs re-made like value_info.
- model: `make_model` with the opset imports graphsurgeon computes, its
  producer name/version and IR version (the caller restores the other fields,
  `gs_bridge.restore_model_fields`).

`OutOfScope` is raised for anything not reproduced here (the caller then takes
the graphsurgeon round trip): local functions, If/Loop/Scan bodies, sparse
initializers, training info, a tensor with several producers or produced and
also an initializer or graph input, duplicate names, non-tensor types,
attributes graphsurgeon would skip or cannot re-make (empty lists, non-UTF-8
strings), a cycle, or more than one opset domain graphsurgeon would add.
"""

from __future__ import annotations

import onnx
from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx
from onnx_graphsurgeon.importers.onnx_importer import get_numpy_type, get_onnx_tensor_dtype, get_onnx_tensor_shape

from trtpipe.graph.gs_order import SUBGRAPH_ATTRIBUTE_TYPES, _level_order, _used


class OutOfScope(Exception):
    """The model needs the graphsurgeon round trip (the message says why)."""


def check_scope(model: onnx.ModelProto) -> None:
    """Raise `OutOfScope` for a model whose round trip this module does not reproduce."""
    graph = model.graph
    if model.functions or graph.sparse_initializer or model.training_info:
        raise OutOfScope("local functions, sparse initializers or training info")
    initializers = [tensor.name for tensor in graph.initializer]
    value_infos = [value.name for value in graph.value_info]
    if len(set(initializers)) != len(initializers) or len(set(value_infos)) != len(value_infos):
        raise OutOfScope("duplicate initializer or value_info names")
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.ByteSize() and value.type.WhichOneof("value") != "tensor_type":
            raise OutOfScope(f"{value.name!r} is not a tensor")
    input_names = {value.name for value in graph.input}
    produced: set[str] = set()
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type in SUBGRAPH_ATTRIBUTE_TYPES:
                raise OutOfScope("If/Loop/Scan bodies")
        for name in node.output:
            if name and (name in produced or name in input_names):
                raise OutOfScope(f"tensor {name!r} has several producers or is a graph input")
            produced.add(name)
    if produced.intersection(initializers):
        raise OutOfScope("a node produces an initializer")


def export_like_graphsurgeon(working: onnx.ModelProto, nodes: list[onnx.NodeProto],
                             new_initializers: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
    """The model graphsurgeon writes for `working` (as imported) with its node list replaced by `nodes`
    and `new_initializers` added, after `cleanup().toposort()`. `check_scope(working)` must have passed."""
    graph = working.graph
    _CANONICAL_TYPES.clear()
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    if set(new_initializers) & (set(initializers) | {name for node in nodes for name in node.output}):
        raise OutOfScope("a new initializer's name is taken")
    initializers.update(new_initializers)
    order = _cleaned_sorted_order(graph, nodes, initializers)
    kept = [nodes[index] for index in order]

    inputs = [value for value in graph.input if value.name not in initializers]
    types = {}
    for entries in (graph.value_info, graph.input, graph.output):  # the importer's precedence
        for value in entries:
            types.setdefault(value.name, value)
    names = [value.name for value in inputs]  # Graph.tensors(): first occurrence wins
    for node in kept:
        names.extend(node.input)
        names.extend(node.output)
    names.extend(value.name for value in graph.output)
    walked = dict.fromkeys(names)
    walked.pop("", None)
    interface = {value.name for value in inputs} | {value.name for value in graph.output}
    value_info = [_value_info(types[name], name) for name in walked
                  if name not in interface and name not in initializers and name in types
                  and types[name].type.ByteSize()]
    if any(value.name in initializers for value in graph.output):
        raise OutOfScope("a graph output is an initializer")
    # What onnx.helper.make_graph then make_model(graph, opset_imports=..., functions=[]) write,
    # built in place: make_model's CopyFrom of the whole graph would copy every node twice.
    model = onnx.ModelProto()
    model.ir_version = onnx.IR_VERSION
    exported = model.graph
    exported.node.extend(_node(node) for node in kept)
    exported.name = graph.name
    exported.input.extend(_value_info(types[value.name], value.name) for value in inputs)
    exported.output.extend(_value_info(types[value.name], value.name) for value in graph.output)
    exported.initializer.extend(initializers[name] for name in walked if name in initializers)
    exported.value_info.extend(value_info)
    if graph.doc_string:
        exported.doc_string = graph.doc_string
    model.opset_import.extend(_opset_imports(working, kept))
    model.producer_name = working.producer_name
    model.producer_version = working.producer_version
    model.ir_version = working.ir_version
    return model


def _cleaned_sorted_order(graph: onnx.GraphProto, nodes: list[onnx.NodeProto], initializers) -> list[int]:
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if name:
                if name in producer or name in initializers:
                    raise OutOfScope(f"tensor {name!r} has several producers")
                producer[name] = index
    sources = [list(dict.fromkeys(producer[name] for name in node.input if name in producer)) for node in nodes]
    used = _used(graph, sources, producer)
    order = _level_order([index for index in range(len(nodes)) if index in used], sources)
    if order is None:
        raise OutOfScope("the graph has a cycle")
    return order


def _opset_imports(working: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> list[onnx.OperatorSetIdProto]:
    """graphsurgeon's `update_import_domains`: the model's imports plus each node domain missing from them."""
    imports = list(working.opset_import)
    present = {entry.domain for entry in imports}
    missing = {node.domain for node in nodes if node.HasField("domain")} - present
    if len(missing) > 1:  # graphsurgeon adds them in set order, which is not reproducible
        raise OutOfScope(f"several opset domains to add: {sorted(missing)}")
    return imports + [onnx.helper.make_opsetid(domain, 1) for domain in missing]


_NODE_FIELDS = {"input", "output", "name", "op_type", "domain", "attribute"}
_VALUE_FIELD = {
    onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
    onnx.AttributeProto.TENSOR: "t", onnx.AttributeProto.FLOATS: "floats", onnx.AttributeProto.INTS: "ints",
    onnx.AttributeProto.STRINGS: "strings",
}


def _node(node: onnx.NodeProto) -> onnx.NodeProto:
    """`node` as graphsurgeon exports it (itself when it is already in that form)."""
    fields = {field.name for field, _ in node.ListFields()}
    canonical = (fields <= _NODE_FIELDS and "op_type" in fields and ("name" not in fields or node.name)
                 and all(_canonical_attribute(attribute) for attribute in node.attribute))
    if canonical:
        return node
    remade = onnx.helper.make_node(node.op_type, inputs=list(node.input), outputs=list(node.output),
                                   name=node.name, domain=node.domain if node.HasField("domain") else None)
    remade.attribute.extend(_attribute(attribute) for attribute in node.attribute
                            if attribute.type in _VALUE_FIELD)  # graphsurgeon skips the other types
    return remade


def _canonical_attribute(attribute: onnx.AttributeProto) -> bool:
    value_field = _VALUE_FIELD.get(attribute.type)
    if value_field is None or {field.name for field, _ in attribute.ListFields()} != {"name", "type", value_field}:
        return False
    # graphsurgeon writes a TENSOR's name back (`export_tensor_proto`), so an unnamed one gains a "" name.
    return attribute.type != onnx.AttributeProto.TENSOR or attribute.t.HasField("name")


def _attribute(attribute: onnx.AttributeProto) -> onnx.AttributeProto:
    """graphsurgeon's import then `make_attribute` of one attribute of a simple type."""
    if attribute.ref_attr_name:
        raise OutOfScope("an attribute reference outside a function")
    kind = attribute.type
    try:
        if kind == onnx.AttributeProto.STRING:
            value = attribute.s.decode()
        elif kind == onnx.AttributeProto.STRINGS:
            value = [s.decode() for s in attribute.strings]
        elif kind in (onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS):
            value = list(getattr(attribute, _VALUE_FIELD[kind]))
        elif kind == onnx.AttributeProto.TENSOR:
            value = onnx.TensorProto()
            value.CopyFrom(attribute.t)
            value.name = attribute.t.name
        else:
            value = getattr(attribute, _VALUE_FIELD[kind])
    except UnicodeDecodeError:
        raise OutOfScope(f"attribute {attribute.name!r} is not UTF-8") from None
    if isinstance(value, list) and not value:
        raise OutOfScope(f"attribute {attribute.name!r} is an empty list")
    return onnx.helper.make_attribute(attribute.name, value)


def _value_info(source: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    """graphsurgeon's import then export of one tensor's type (the source itself when that is the same)."""
    if not source.type.ByteSize():
        return onnx.helper.make_empty_tensor_value_info(name)
    if source.name == name and _canonical_value_info(source):
        return source
    dtype = get_onnx_tensor_dtype(source)
    return onnx.helper.make_tensor_value_info(name, dtype_to_onnx(dtype), get_onnx_tensor_shape(source))


def _canonical_value_info(value: onnx.ValueInfoProto) -> bool:
    """Only what `make_tensor_value_info` writes: a name, a tensor type with its element type,
    a shape or none, dims without denotation. Types repeat (thousands of tensors, a few dozen
    types): each distinct type, by its bytes, is checked once per model."""
    if value.HasField("doc_string") or value.metadata_props or not value.HasField("name"):
        return False
    key = value.type.SerializeToString()
    known = _CANONICAL_TYPES.get(key)
    if known is None:
        known = _CANONICAL_TYPES[key] = _canonical_type(value.type)
    return known


def _canonical_type(kind: onnx.TypeProto) -> bool:
    if kind.HasField("denotation") or kind.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = kind.tensor_type
    if not tensor_type.HasField("elem_type") or not _round_trips(tensor_type.elem_type):
        return False
    return not any(dim.HasField("denotation") for dim in tensor_type.shape.dim)


_CANONICAL_TYPES: dict[bytes, bool] = {}  # cleared by each export
_ROUND_TRIPS: dict[int, bool] = {}


def _round_trips(elem_type: int) -> bool:
    """Whether graphsurgeon's dtype conversion gives `elem_type` back."""
    if elem_type not in _ROUND_TRIPS:
        try:
            dtype = get_numpy_type(elem_type)
            _ROUND_TRIPS[elem_type] = dtype_to_onnx(elem_type if dtype is None else dtype) == elem_type
        except Exception:  # an element type graphsurgeon cannot convert: remade (or refused) by the slow path
            _ROUND_TRIPS[elem_type] = False
    return _ROUND_TRIPS[elem_type]
