"""What onnx-graphsurgeon 0.6.1's import and `export_onnx` make of a graph's protos, without the round trip.

Used by fast_fold.py, which must write exactly what Polygraphy's folding pass
(a graphsurgeon import, fold, `cleanup()` and export) writes:

- a node comes back as `helper.make_node` plus `make_attribute` per
  attribute: nodes whose fields survive that unchanged (`check_node`) are
  kept as they are, anything else is out of scope (graphsurgeon drops doc
  strings, metadata and attribute kinds it does not import);
- a value info comes back as `helper.make_tensor_value_info(name, elem_type,
  dims)` (`make_empty_tensor_value_info` without a type): `ValueInfos`
  rebuilds each once per distinct type;
- initializers and value infos are listed in `Graph.tensors()` order
  (`tensor_order`): graph inputs, each node's inputs then outputs, graph outputs;
- the export writes into the input model's protos (`repeat_side_effects`);
- the model is `helper.make_model(helper.make_graph(...))` with graphsurgeon's
  arguments (`exported_model`), built in place rather than copied twice.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from trtpipe.graph.weights_on_disk import is_on_disk

NODE_FIELDS = frozenset({"input", "output", "name", "op_type", "domain", "attribute"})
VALUE_FIELDS = {onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
                onnx.AttributeProto.TENSOR: "t", onnx.AttributeProto.FLOATS: "floats",
                onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.STRINGS: "strings"}
# Element types graphsurgeon sizes without raising (its LazyValues computes every constant's nbytes).
GS_SIZED_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, TensorProto.INT32,
    TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT32,
    TensorProto.UINT64, TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ, TensorProto.UINT4,
    TensorProto.INT4})


class OutOfScope(Exception):
    """The model needs Polygraphy's own pass; the message says why."""


def require(condition: bool, reason: str) -> None:
    if not condition:
        raise OutOfScope(reason)


def check_node(node: onnx.NodeProto) -> dict:
    """The node's present fields (name -> value), when graphsurgeon writes it back unchanged; else OutOfScope.

    Unchanged but for one thing `repeat_side_effects` does to the input model
    as graphsurgeon does: a tensor attribute's name becomes explicit.
    """
    fields = {field.name: value for field, value in node.ListFields()}
    require(fields.keys() <= NODE_FIELDS and "op_type" in fields, f"node fields {sorted(fields)}")
    require(fields.get("name", True) != "", "a node with an explicitly empty name")  # make_node drops it
    for attribute in fields.get("attribute", ()):
        value_field = VALUE_FIELDS.get(attribute.type)
        present = {field.name for field, _ in attribute.ListFields()}
        # A missing value (make_attribute rejects empty lists), a doc string or a reference: not ours.
        require(value_field is not None and present == {"name", "type", value_field},
                f"attribute {attribute.name!r} of {node.op_type}")
        if attribute.type == onnx.AttributeProto.STRING:
            _utf8(attribute.s)
        elif attribute.type == onnx.AttributeProto.STRINGS:
            for text in attribute.strings:
                _utf8(text)
        elif attribute.type == onnx.AttributeProto.TENSOR:
            require(not is_on_disk(attribute.t) and attribute.t.data_type in GS_SIZED_TYPES,
                    "a tensor attribute on disk or of an unusual type")
    return fields


def _utf8(text: bytes) -> None:
    try:
        text.decode()
    except UnicodeDecodeError as error:
        raise OutOfScope("a string attribute that is not UTF-8") from error


def type_info(value: onnx.ValueInfoProto) -> tuple[int, list | None] | None:
    """graphsurgeon's dtype and shape of a tensor typed by `value` (None: neither)."""
    if value.type.ByteSize() == 0:
        return None
    require(value.type.WhichOneof("value") == "tensor_type", f"{value.name!r} is not a tensor")
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return tensor_type.elem_type, None
    dims = []
    for dim in tensor_type.shape.dim:
        kind = dim.WhichOneof("value")
        dims.append(dim.dim_param if kind == "dim_param" else dim.dim_value if kind == "dim_value" else None)
    return tensor_type.elem_type, dims


class ValueInfos:
    """Tensor name -> graphsurgeon's dtype/shape, and the value infos its export writes for them.

    Read lazily: most of a large model's value infos are only copied, and those
    of folded tensors not even that.
    """

    def __init__(self):
        self._values: dict[str, onnx.ValueInfoProto] = {}
        self._known: dict[str, tuple] = {}  # name -> (info, the exported TypeProto's bytes or None)
        self._by_type: dict[bytes, tuple] = {}

    def add(self, value: onnx.ValueInfoProto) -> None:
        require(value.name not in self._values, f"tensor {value.name!r} described twice")
        self._values[value.name] = value

    def __contains__(self, name: str) -> bool:
        return name in self._values

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
                    info = type_info(value)
                    known = self._by_type[key] = (info, None if info is None else tensor_type_bytes(*info))
            self._known[name] = known
        return known

    def get(self, name: str):
        return self._resolved(name)[0]

    def described(self, name: str) -> bool:
        return self._resolved(name)[0] is not None

    def proto(self, name: str) -> onnx.ValueInfoProto:
        """`make_tensor_value_info(name, dtype, shape)`, or `make_empty_tensor_value_info(name)` without a type."""
        encoded = name.encode()
        data = b"\n" + _varint(len(encoded)) + encoded
        exported = self._resolved(name)[1]
        if exported is not None:
            data += b"\x12" + _varint(len(exported)) + exported
        return onnx.ValueInfoProto.FromString(data)


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


def tensor_order(input_names, node_inputs, node_outputs, output_names) -> list[str]:
    """graphsurgeon's `Graph.tensors()` order: graph inputs, each node's inputs then outputs, graph outputs."""
    names = dict.fromkeys(input_names)
    for inputs, outputs in zip(node_inputs, node_outputs):
        names.update(dict.fromkeys(inputs))
        names.update(dict.fromkeys(outputs))
    names.update(dict.fromkeys(output_names))
    names.pop("", None)
    return list(names)


def repeat_side_effects(nodes, lowered: dict[str, onnx.NodeProto]) -> None:
    """What graphsurgeon's exports write into the input model's protos.

    Each tensor attribute it exports gets its name set (explicit even when
    empty), and a lowered Constant's tensor takes its output's name. An undone
    folding pass continues with the model as given, so these count.
    """
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                attribute.t.name = attribute.t.name
    for name, node in lowered.items():
        node.attribute[0].t.name = name


def exported_model(source: onnx.ModelProto, nodes, inputs, outputs, initializer, value_info) -> onnx.ModelProto:
    """`make_model(make_graph(nodes, source's graph name, ..., doc_string=...), functions=[], opset_imports=
    source's)` with the producer fields and IR version of `source`, as graphsurgeon's `export_onnx` writes it.

    Built directly in the new model: `make_model` would copy the whole graph (weights too) once more.
    """
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
    model.opset_import.extend(source.opset_import)
    model.producer_name = source.producer_name
    model.producer_version = source.producer_version
    model.ir_version = source.ir_version
    return model
