"""Ranges of integer inputs read from the model (issue 30, item 5).

An integer input without `data.inputs.<name>.low/high` was an error, one input at a time, and
the pasted example range [0, 2) gave a "passing" verdict on ids {0, 1}. The model often says
what its integer inputs are:

- Token ids: an input whose values reach the indices of a `Gather` on a constant table (an
  embedding) is an index into that table: [0, rows), rows = the table's size along the Gather's
  axis. Several such tables (one input read by two embeddings): the smallest bounds it.
- A mask: an input whose values are only compared with 0 or 1 (`Equal`, `Greater`, `Less`...),
  cast to bool, or cast to float and taken from 1 (`1 - mask`, BERT/T5/GPT-2 exports'
  attention mask) is {0, 1}: [0, 2).

Decisions:
- Values are followed through the ops that move or reshape them without computing new ones
  (Reshape, Unsqueeze, Squeeze, Flatten, Identity, Expand, Transpose, Slice, an integer Cast);
  `Shape` and `Size` read no value and are ignored. Any other use makes a mask unreadable (its
  values could mean anything there); a table index stays bounded by the table whatever else
  reads it, since every value in [0, rows) is valid for the Gather.
- Only what the model states is used: no input name is looked at ("input_ids", "mask"), since
  exports name them differently.
- A sample value outside [-rows, rows) of a table its input indexes is refused before any stage
  (`check_table_indices`): ONNX Runtime fails on it and TensorRT's result is undefined. Negative
  indices inside that range are valid ONNX (counted from the end) and are kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from trtpipe.errors import UserError

PASS_THROUGH = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose", "Slice"}
NO_VALUES = {"Shape", "Size"}
COMPARISONS = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}
INTEGER_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
                 onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


@dataclass(frozen=True)
class ReadRange:
    """[low, high) of an integer input and why (printed once, recorded in the data block)."""
    low: int
    high: int
    reason: str
    table_rows: int | None = None  # set for a table index: the size its samples are checked against


class _Graph:
    """Consumers of each tensor; shapes of constants (initializers, Constant nodes, and a Cast,
    Identity or DequantizeLinear of one: an FP16 or quantized table); values of scalar constants."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        self.shapes: dict[str, list[int]] = {}
        self.scalars: dict[str, float] = {}
        for tensor in model.graph.initializer:
            self.shapes[tensor.name] = list(tensor.dims)
            if int(np.prod(tensor.dims)) == 1 and tensor.data_location != onnx.TensorProto.EXTERNAL:
                self.scalars[tensor.name] = float(onnx.numpy_helper.to_array(tensor).reshape(-1)[0])
        for node in model.graph.node:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
            if node.op_type == "Constant" and node.output:
                value = next((a for a in node.attribute if a.name == "value"), None)
                if value is not None:
                    self.shapes[node.output[0]] = list(value.t.dims)
                    if int(np.prod(value.t.dims)) == 1:
                        self.scalars[node.output[0]] = float(onnx.numpy_helper.to_array(value.t).reshape(-1)[0])
            elif node.op_type in ("Cast", "Identity", "DequantizeLinear") and node.input[0] in self.shapes:
                self.shapes[node.output[0]] = self.shapes[node.input[0]]

    def shape(self, name: str) -> list[int] | None:
        return self.shapes.get(name)

    def is_zero_or_one(self, name: str) -> bool:
        return self.scalars.get(name) in (0.0, 1.0)

    def is_one(self, name: str) -> bool:
        return self.scalars.get(name) == 1.0


def _attribute(node: onnx.NodeProto, name: str, default):
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else onnx.helper.get_attribute_value(found)


def _uses(graph: _Graph, tensor: str, seen: set[str]):
    """(node, input index) of every use of `tensor`'s values, through the pass-through ops."""
    if tensor in seen:
        return
    seen.add(tensor)
    for node in graph.consumers.get(tensor, ()):
        position = list(node.input).index(tensor)
        if node.op_type in NO_VALUES:
            continue
        integer_cast = node.op_type == "Cast" and _attribute(node, "to", 0) in INTEGER_TYPES
        if (node.op_type in PASS_THROUGH and position == 0) or integer_cast:
            yield from _uses(graph, node.output[0], seen)
        else:
            yield node, position


def _is_mask_use(graph: _Graph, node: onnx.NodeProto, position: int) -> bool:
    if node.op_type in COMPARISONS:
        return graph.is_zero_or_one(node.input[1 - position])
    if node.op_type == "Cast" and _attribute(node, "to", 0) == onnx.TensorProto.BOOL:
        return True
    if node.op_type == "Cast" and _attribute(node, "to", 0) in FLOAT_TYPES:
        uses = list(_uses(graph, node.output[0], set()))
        return bool(uses) and all(use.op_type == "Sub" and graph.is_one(use.input[1 - at]) for use, at in uses)
    return False


def read_ranges(model: onnx.ModelProto, names: list[str]) -> dict[str, ReadRange]:
    """The range the model states for each of `names` (integer graph inputs) that has one."""
    graph = _Graph(model)
    found: dict[str, ReadRange] = {}
    for name in names:
        uses = list(_uses(graph, name, set()))
        tables = []
        for node, position in uses:
            if node.op_type == "Gather" and position == 1 and (shape := graph.shape(node.input[0])):
                axis = int(_attribute(node, "axis", 0))
                if -len(shape) <= axis < len(shape):
                    tables.append((shape[axis], node.input[0], node.name or node.output[0]))
        if tables:
            rows, table, gather = min(tables)
            found[name] = ReadRange(0, int(rows), f"ids of the {rows}-row table {table!r} read by Gather {gather!r}",
                                    int(rows))
        elif uses and all(_is_mask_use(graph, node, position) for node, position in uses):
            found[name] = ReadRange(0, 2, "a mask (only compared with 0/1, or cast and taken from 1)")
    return found


def check_table_indices(feeds: list[Mapping[str, np.ndarray]], ranges: Mapping[str, ReadRange], where: str) -> None:
    """Sample ids outside the table their input indexes: exit 2, naming the table's size."""
    for name, read in ranges.items():
        if read.table_rows is None:
            continue
        for index, feed in enumerate(feeds):
            values = np.asarray(feed.get(name, ()))
            if values.size and (int(values.min()) < -read.table_rows or int(values.max()) >= read.table_rows):
                bad = int(values.max()) if int(values.max()) >= read.table_rows else int(values.min())
                raise UserError(
                    f"sample input {name!r} in {where} (set {index}) holds {bad}, outside the model's table: "
                    f"{name} are {read.reason}, so valid values are 0 to {read.table_rows - 1}",
                    "give ids below the table's size (the tokenizer of this model's vocabulary)")
