"""What onnx-graphsurgeon 0.6.1's import and `export_onnx` make of a graph's protos, without the round trip.

The one statement of graphsurgeon's export behaviour for the two stages that skip
its round trip: sanitize's first folding pass (fast_fold.py, which must write what
Polygraphy's import, fold, `cleanup()` and export writes) and upgrade_opset's
LayerNorm fusion (layernorm_proto.py: import, edit, `cleanup().toposort()`,
export). When graphsurgeon changes, this module changes.

- nodes (`exported_node`): graphsurgeon writes `helper.make_node(op, inputs,
  outputs, name, domain)` plus `make_attribute` per imported attribute, so a
  node already in that form is kept as it is and any other one is re-made (doc
  strings and other node fields dropped, attribute types it does not import
  skipped, an explicitly empty name dropped, a TENSOR attribute's name made
  explicit as `export_tensor_proto` writes it). `check_node` refuses what its
  import or export would raise on (non-UTF-8 strings, a tensor attribute of a
  type it cannot size, an empty list, an attribute reference in a main graph).
- value infos (`ValueInfos`): a tensor's dtype and shape as the importer reads
  them (first `value_info` entry, else graph input, else graph output), written
  as `make_tensor_value_info(name, dtype_to_onnx(dtype), shape)`, or
  `make_empty_tensor_value_info` without a type; encoded here once per distinct
  type (`tensor_type_bytes`).
- order (`tensor_order`): `Graph.tensors()`, graph inputs, each node's inputs
  then outputs, graph outputs: the order of initializers and value_info.
- model (`exported_model`): `make_model(make_graph(...), functions=[],
  opset_imports=update_import_domains)` with the source's producer fields and IR
  version, built in place (make_model would copy the whole graph once more).
- side effects (`repeat_side_effects`): what the export writes into the protos
  it imported (a TENSOR attribute's name set, a lowered Constant's tensor renamed).
- `export_like_graphsurgeon`: the fusion's round trip, `cleanup().toposort()`
  (`gs_order`) then the export above.

Decisions:
- `OutOfScope` is raised for anything not reproduced here; each caller then takes
  graphsurgeon's own round trip: local functions, If/Loop/Scan bodies, sparse
  initializers, training info, duplicate initializer or value_info names, a tensor
  with several producers or produced and also an initializer or graph input,
  non-tensor types, initializers or tensor attributes of a type graphsurgeon's
  importer cannot size (`GS_SIZED_TYPES`, a subset of what it sizes), a cycle, or
  more than one opset domain to add (graphsurgeon adds them in set order, not
  reproducible).
- Duplicate value_info entries are refused rather than merged: graphsurgeon merges
  them with `dtype or dtype`, where a NumPy dtype is false.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx
from onnx_graphsurgeon.importers.onnx_importer import get_numpy_type, get_onnx_tensor_shape

from trtpipe.graph.onnx_gs.gs_order import _level_order, _used
from trtpipe.onnxmodel.subgraphs import SUBGRAPH_ATTRIBUTE_TYPES

NODE_FIELDS = frozenset({"input", "output", "name", "op_type", "domain", "attribute"})
VALUE_FIELDS = {onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
                onnx.AttributeProto.TENSOR: "t", onnx.AttributeProto.FLOATS: "floats",
                onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.STRINGS: "strings"}
_LISTS = frozenset({onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS})
# Element types graphsurgeon sizes without raising (its LazyValues computes every constant's nbytes).
GS_SIZED_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, TensorProto.INT32,
    TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT32,
    TensorProto.UINT64, TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ, TensorProto.UINT4,
    TensorProto.INT4})


class OutOfScope(Exception):
    """The model needs graphsurgeon's own round trip (the message says why)."""


def require(condition: bool, reason: str) -> None:
    if not condition:
        raise OutOfScope(reason)


# -- nodes -------------------------------------------------------------------------------------

def check_node(node: onnx.NodeProto) -> None:
    """OutOfScope unless graphsurgeon imports and exports `node` without raising."""
    for attribute in node.attribute:
        kind = attribute.type
        if kind in SUBGRAPH_ATTRIBUTE_TYPES:
            raise OutOfScope("If/Loop/Scan bodies")
        if kind not in VALUE_FIELDS:
            continue  # skipped by the importer
        require(not attribute.ref_attr_name, f"an attribute reference outside a function ({attribute.name!r})")
        if kind in _LISTS:
            # make_attribute cannot infer the type of an empty list: graphsurgeon's export raises.
            require(len(getattr(attribute, VALUE_FIELDS[kind])) > 0, f"attribute {attribute.name!r} is an empty list")
        if kind == onnx.AttributeProto.STRING:
            _utf8(attribute.s)
        elif kind == onnx.AttributeProto.STRINGS:
            for text in attribute.strings:
                _utf8(text)
        elif kind == onnx.AttributeProto.TENSOR:
            require(attribute.t.data_type in GS_SIZED_TYPES, "a tensor attribute of an unusual type")


def _utf8(text: bytes) -> None:
    try:
        text.decode()
    except UnicodeDecodeError as error:
        raise OutOfScope("a string attribute that is not UTF-8") from error


def exported_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """`node` as graphsurgeon exports it: itself when already in that form, else re-made.
    `check_node(node)` must have passed."""
    if _canonical_node(node):
        return node
    remade = onnx.helper.make_node(node.op_type, inputs=list(node.input), outputs=list(node.output),
                                   name=node.name, domain=node.domain if node.HasField("domain") else None)
    remade.attribute.extend(_attribute(attribute) for attribute in node.attribute if attribute.type in VALUE_FIELDS)
    return remade


def _canonical_node(node: onnx.NodeProto) -> bool:
    fields = {field.name for field, _ in node.ListFields()}
    return (fields <= NODE_FIELDS and "op_type" in fields and ("name" not in fields or node.name != "")
            and all(_canonical_attribute(attribute) for attribute in node.attribute))


def _canonical_attribute(attribute: onnx.AttributeProto) -> bool:
    value_field = VALUE_FIELDS.get(attribute.type)
    if value_field is None or {field.name for field, _ in attribute.ListFields()} != {"name", "type", value_field}:
        return False
    # graphsurgeon writes a TENSOR's name back (`export_tensor_proto`), so an unnamed one gains a "" name.
    return attribute.type != onnx.AttributeProto.TENSOR or attribute.t.HasField("name")


def _attribute(attribute: onnx.AttributeProto) -> onnx.AttributeProto:
    """graphsurgeon's import then `make_attribute` of one attribute of a type it imports."""
    kind = attribute.type
    if kind == onnx.AttributeProto.STRING:
        value = attribute.s.decode()
    elif kind == onnx.AttributeProto.STRINGS:
        value = [s.decode() for s in attribute.strings]
    elif kind in (onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS):
        value = list(getattr(attribute, VALUE_FIELDS[kind]))
    elif kind == onnx.AttributeProto.TENSOR:
        value = onnx.TensorProto()
        value.CopyFrom(attribute.t)
        value.name = attribute.t.name
    else:
        value = getattr(attribute, VALUE_FIELDS[kind])
    return onnx.helper.make_attribute(attribute.name, value)


def repeat_side_effects(nodes, lowered: dict[str, onnx.NodeProto]) -> None:
    """What graphsurgeon's exports write into the protos it imported.

    Each tensor attribute it exports gets its name set (explicit even when empty),
    and a lowered Constant's tensor takes its output's name. (Only the folding pass
    needs this: an undone pass continues with the model as given.)
    """
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                attribute.t.name = attribute.t.name
    for name, node in lowered.items():
        node.attribute[0].t.name = name


# -- value infos -------------------------------------------------------------------------------

class ValueInfos:
    """Tensor name -> graphsurgeon's dtype/shape, and the value infos its export writes for them.

    Built from a graph as the importer reads it (value_info, then graph inputs that
    are not initializers, then graph outputs; the first entry wins); resolved
    lazily, once per distinct type: most of a large model's value infos are only
    copied, and those of folded tensors not even that.
    """

    def __init__(self, graph: onnx.GraphProto, initializers):
        self._values: dict[str, onnx.ValueInfoProto] = {}
        for value in graph.value_info:
            require(value.name not in self._values, f"tensor {value.name!r} described twice in value_info")
            self._values[value.name] = value
        for value in [*(value for value in graph.input if value.name not in initializers), *graph.output]:
            self._values.setdefault(value.name, value)
        self._known: dict[str, tuple] = {}  # name -> (info, the exported TypeProto's bytes or None)
        self._by_type: dict[bytes, tuple] = {}
        self._elem_types: dict[int, int] = {}  # ONNX element type -> as exported (this export's, not global)

    def source(self, name: str) -> onnx.ValueInfoProto | None:
        """The entry the importer types `name` from (None: none)."""
        return self._values.get(name)

    def _resolved(self, name: str) -> tuple:
        known = self._known.get(name)
        if known is None:
            value = self._values.get(name)
            if value is None:
                known = (None, None)
            else:
                key = value.type.SerializeToString()
                known = self._by_type.get(key)
                if known is None:
                    info = type_info(value, self._elem_types)
                    known = self._by_type[key] = (info, None if info is None else tensor_type_bytes(*info))
            self._known[name] = known
        return known

    def get(self, name: str) -> tuple[int, list | None] | None:
        """(ONNX element type as exported, shape) of `name`; None when it has no type."""
        return self._resolved(name)[0]

    def described(self, name: str) -> bool:
        """Whether the export writes a value_info for `name` (graphsurgeon knows a dtype or a shape)."""
        return self._resolved(name)[0] is not None

    def proto(self, name: str) -> onnx.ValueInfoProto:
        """`make_tensor_value_info(name, dtype, shape)`, or `make_empty_tensor_value_info(name)` without a type."""
        encoded = name.encode()
        data = b"\n" + _varint(len(encoded)) + encoded
        exported = self._resolved(name)[1]
        if exported is not None:
            data += b"\x12" + _varint(len(exported)) + exported
        return onnx.ValueInfoProto.FromString(data)


def type_info(value: onnx.ValueInfoProto, elem_types: dict[int, int]) -> tuple[int, list | None] | None:
    """graphsurgeon's exported element type and its shape of a tensor typed by `value` (None: no type);
    `elem_types` caches the element types converted so far, for one export."""
    if value.type.ByteSize() == 0:
        return None
    require(value.type.WhichOneof("value") == "tensor_type", f"{value.name!r} is not a tensor")
    return _exported_elem_type(value.type.tensor_type.elem_type, value, elem_types), get_onnx_tensor_shape(value)


def _exported_elem_type(elem_type: int, value: onnx.ValueInfoProto, cache: dict[int, int]) -> int:
    """`dtype_to_onnx(get_onnx_tensor_dtype(value))`: the element type after graphsurgeon's NumPy round trip
    (read through `get_numpy_type`, as `get_onnx_tensor_dtype` does, without its log line)."""
    if elem_type not in cache:
        try:
            dtype = get_numpy_type(elem_type)
            cache[elem_type] = dtype_to_onnx(elem_type if dtype is None else dtype)
        except Exception as error:  # an element type graphsurgeon cannot convert: its own round trip decides
            raise OutOfScope(f"element type {elem_type} of {value.name!r}") from error
    return cache[elem_type]


def tensor_type_bytes(elem_type: int, dims: list | None) -> bytes:
    """`helper.make_tensor_type_proto(elem_type, dims).SerializeToString()`, encoded here (tests compare).

    A TypeProto's `tensor_type` (1) holds `elem_type` (1, always written) and,
    when the dims are known, `shape` (2, written even when empty) whose `dim`s
    (1) hold `dim_value` (1), `dim_param` (2) or nothing (an unknown dim).
    """
    tensor = b"\x08" + _varint(elem_type)
    if dims is not None:
        shape = bytearray()
        for dim in dims:
            if dim is None:
                shape += b"\x0a\x00"
                continue
            if isinstance(dim, str):
                encoded = dim.encode()
                field = b"\x12" + _varint(len(encoded)) + encoded
            else:
                field = b"\x08" + _varint(dim)
            shape += b"\x0a" + _varint(len(field)) + field
        tensor += b"\x12" + _varint(len(shape)) + bytes(shape)
    return b"\x0a" + _varint(len(tensor)) + tensor


def _varint(number: int) -> bytes:
    number &= (1 << 64) - 1  # int64 fields: a negative value is its 64-bit two's complement
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


# -- order and model ---------------------------------------------------------------------------

def tensor_order(input_names, node_inputs, node_outputs, output_names) -> list[str]:
    """graphsurgeon's `Graph.tensors()` order: graph inputs, each node's inputs then outputs, graph outputs."""
    names = dict.fromkeys(input_names)
    for inputs, outputs in zip(node_inputs, node_outputs):
        names.update(dict.fromkeys(inputs))
        names.update(dict.fromkeys(outputs))
    names.update(dict.fromkeys(output_names))
    names.pop("", None)
    return list(names)


def opset_imports(source: onnx.ModelProto, nodes) -> list[onnx.OperatorSetIdProto]:
    """graphsurgeon's `update_import_domains`: the model's imports plus each node domain missing from them."""
    imports = list(source.opset_import)  # the importer's import_domains (even when empty)
    present = {entry.domain for entry in imports}
    missing = {node.domain for node in nodes if node.HasField("domain")} - present
    require(len(missing) <= 1, f"several opset domains to add: {sorted(missing)}")  # added in set order
    return imports + [onnx.helper.make_opsetid(domain, 1) for domain in missing]


def exported_model(source: onnx.ModelProto, nodes, inputs, outputs, initializer, value_info) -> onnx.ModelProto:
    """`make_model(make_graph(nodes, source's graph name, ..., doc_string=...), functions=[], opset_imports=
    update_import_domains)` with the producer fields and IR version of `source`, as `export_onnx` writes it.

    `nodes` are the exported nodes (`exported_node`). Built directly in the new model: `make_model`
    would copy the whole graph (weights too) once more.
    """
    imports = opset_imports(source, nodes)
    model = onnx.ModelProto()
    model.ir_version = onnx.IR_VERSION
    graph = model.graph
    graph.SetInParent()
    graph.node.extend(nodes)
    graph.name = source.graph.name
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    graph.initializer.extend(initializer)
    graph.value_info.extend(value_info)
    if source.graph.doc_string:
        graph.doc_string = source.graph.doc_string
    model.opset_import.extend(imports)
    model.producer_name = source.producer_name
    model.producer_version = source.producer_version
    model.ir_version = source.ir_version
    return model


# -- the fusion's round trip: cleanup().toposort() then export -----------------------------------

def check_scope(model: onnx.ModelProto) -> None:
    """Raise `OutOfScope` for a model whose import this module does not reproduce."""
    graph = model.graph
    require(not (model.functions or graph.sparse_initializer or model.training_info),
            "local functions, sparse initializers or training info")
    initializers = [tensor.name for tensor in graph.initializer]
    require(len(set(initializers)) == len(initializers), "duplicate initializer names")
    require(all(tensor.data_type in GS_SIZED_TYPES for tensor in graph.initializer),
            "an initializer of an unusual type")
    for value in [*graph.input, *graph.output, *graph.value_info]:
        require(not value.type.ByteSize() or value.type.WhichOneof("value") == "tensor_type",
                f"{value.name!r} is not a tensor")
    input_names = {value.name for value in graph.input}
    produced: set[str] = set()
    for node in graph.node:
        check_node(node)
        for name in node.output:
            require(not name or (name not in produced and name not in input_names),
                    f"tensor {name!r} has several producers or is a graph input")
            produced.add(name)
    require(not produced.intersection(initializers), "a node produces an initializer")


def export_like_graphsurgeon(working: onnx.ModelProto, nodes: list[onnx.NodeProto],
                             new_initializers: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
    """The model graphsurgeon writes for `working` (as imported) with its node list replaced by `nodes`
    and `new_initializers` added, after `cleanup().toposort()`. `check_scope(working)` must have passed."""
    graph = working.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    # A graph input or output of that name too: graphsurgeon would hold two tensors of one name (which one
    # its export keeps is not reproduced here).
    taken = {*initializers, *(name for node in nodes for name in node.output),
             *(value.name for value in [*graph.input, *graph.output])}
    require(not set(new_initializers) & taken, "a new initializer's name is taken")
    initializers.update(new_initializers)
    values = ValueInfos(graph, initializers)
    require(not any(value.name in initializers for value in graph.output), "a graph output is an initializer")
    kept = [nodes[index] for index in _cleaned_sorted_order(graph, nodes, initializers)]
    input_names = [value.name for value in graph.input if value.name not in initializers]
    output_names = [value.name for value in graph.output]
    walked = tensor_order(input_names, [node.input for node in kept], [node.output for node in kept], output_names)
    interface = set(input_names) | set(output_names)
    return exported_model(
        working, [exported_node(node) for node in kept], [values.proto(name) for name in input_names],
        [values.proto(name) for name in output_names], [initializers[name] for name in walked if name in initializers],
        [values.proto(name) for name in walked
         if name not in interface and name not in initializers and values.described(name)])


def _cleaned_sorted_order(graph: onnx.GraphProto, nodes: list[onnx.NodeProto], initializers) -> list[int]:
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if name:
                require(name not in producer and name not in initializers, f"tensor {name!r} has several producers")
                producer[name] = index
    sources = [list(dict.fromkeys(producer[name] for name in node.input if name in producer)) for node in nodes]
    used = _used(graph, sources, producer)
    order = _level_order([index for index in range(len(nodes)) if index in used], sources)
    require(order is not None, "the graph has a cycle")
    return order
