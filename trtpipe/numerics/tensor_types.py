"""The element type of every tensor of a model, so the emulator knows what to round.

Decisions:
- ONNX shape inference gives most types. It runs with `strict_mode=False`, so a
  node it cannot handle (a custom op, a data-dependent shape) leaves its
  outputs untyped instead of failing the whole model, and on a copy of the
  model: `infer_shapes` returns a new model and the caller's stays untouched.
- A tensor that inference left untyped gets its type from its producer's
  schema: an output whose type constraint is shared with an input takes that
  input's type (Add's `C` is `T` like `A`), an output declared with one
  concrete type or a constraint allowing one type takes it. The walk goes in
  node order, so a type found this way feeds the next node's fallback.
- Anything still untyped is *assumed FP32* (not rounded) and listed in
  `assumed` with the reason, so the validation report can say which tensors
  the emulation could not be sure about rather than silently skipping them.
- Subgraphs (If/Loop/Scan bodies) are walked too: tensor names are unique
  across a model (ONNX's SSA rule), so one map covers every graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.onnxmodel.value_info import inferred_copy

from trtpipe.numerics.rounding import UNSUPPORTED_FLOAT_TYPES, is_float_type


@dataclass
class TensorTypes:
    """`types`: tensor name -> ONNX element type; `assumed`: tensor name -> why FP32 was assumed;
    `ranks`: tensor name -> rank, where shape inference knows it."""

    types: dict[str, int]
    assumed: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> int:
        return self.types.get(name, TensorProto.UNDEFINED)


def infer_tensor_types(model: onnx.ModelProto, inferred: onnx.ModelProto | None = None) -> TensorTypes:
    """Types of every tensor in `model` and its subgraphs (see the module docstring); `inferred`:
    `inferred_copy(model)` when the caller already made it (one shape inference less)."""
    inferred = inferred_copy(model) if inferred is None else inferred
    types: dict[str, int] = {}
    for graph in all_graphs(inferred.graph):
        collect_declared(graph, types)
    result = TensorTypes(types, ranks=_ranks(inferred))
    opsets = {entry.domain or "": entry.version for entry in model.opset_import}
    for graph in all_graphs(inferred.graph):
        for node in graph.node:
            _fill_from_schema(node, result, opsets)
    return result


def _ranks(inferred: onnx.ModelProto) -> dict[str, int]:
    ranks = {}
    for graph in all_graphs(inferred.graph):
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
                ranks[value.name] = len(value.type.tensor_type.shape.dim)
    return ranks


def collect_declared(graph: onnx.GraphProto, types: dict[str, int]) -> None:
    """Into `types`: the element types `graph` itself records (inputs, outputs, value_info,
    initializers, sparse initializers, Constant values)."""
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    for sparse in graph.sparse_initializer:
        types[sparse.values.name] = sparse.values.data_type
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.HasField("t"):
                    types.setdefault(node.output[0], attribute.t.data_type)


def _fill_from_schema(node: onnx.NodeProto, result: TensorTypes, opsets: dict[str, int]) -> None:
    missing = [name for name in node.output if name and name not in result.types]
    if not missing:
        return
    schema = _schema(node, opsets)
    for index, name in enumerate(node.output):
        if not name or name in result.types:
            continue
        elem_type, reason = _output_type_from_schema(node, index, schema, result.types)
        if elem_type:
            result.types[name] = elem_type
        else:
            result.assumed[name] = reason


def _schema(node: onnx.NodeProto, opsets: dict[str, int]) -> onnx.defs.OpSchema | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return None


def _output_type_from_schema(
    node: onnx.NodeProto, index: int, schema: onnx.defs.OpSchema | None, types: dict[str, int]
) -> tuple[int, str]:
    """(element type, "") when the schema determines it, else (UNDEFINED, why not)."""
    label = f"output {index} of {node.op_type} node {node.name!r}"
    if schema is None:
        return TensorProto.UNDEFINED, f"{label}: no schema for {node.domain or 'ai.onnx'}::{node.op_type}"
    if not schema.outputs:
        return TensorProto.UNDEFINED, f"{label}: schema declares no outputs"
    type_str = schema.outputs[min(index, len(schema.outputs) - 1)].type_str
    for in_index, input_name in enumerate(node.input):
        if not schema.inputs or not input_name:
            continue
        formal = schema.inputs[min(in_index, len(schema.inputs) - 1)]
        if formal.type_str == type_str and types.get(input_name):
            return types[input_name], ""
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    candidates = allowed.get(type_str, [type_str])
    if len(candidates) == 1:
        elem_type = _elem_type_from_type_str(candidates[0])
        if elem_type:
            return elem_type, ""
    return TensorProto.UNDEFINED, f"{label}: type constraint {type_str} allows {candidates}"


def _elem_type_from_type_str(type_str: str) -> int:
    """`tensor(float16)` -> TensorProto.FLOAT16; anything else (sequences, maps) -> UNDEFINED."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return TensorProto.UNDEFINED
    try:
        return TensorProto.DataType.Value(type_str[len("tensor("):-1].upper())
    except ValueError:
        return TensorProto.UNDEFINED


def is_float_tensor(types: TensorTypes, name: str) -> bool:
    """True for float tensors, and for untyped ones (which the emulator treats as FP32); not for
    FP8/FP4 tensors: those the emulator runs are Q/DQ codes (quantized_codes.py), compared through
    the DequantizeLinear that reads them, not exposed themselves."""
    elem_type = types.get(name)
    return elem_type == TensorProto.UNDEFINED or (is_float_type(elem_type)
                                                  and elem_type not in UNSUPPORTED_FLOAT_TYPES)
