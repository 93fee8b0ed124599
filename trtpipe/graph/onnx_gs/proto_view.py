"""onnx-graphsurgeon's view of a main graph, read straight from the ModelProto (no import).

The LayerNorm rule (`pattern`, `layernorm_rule`) reads nodes and tensors the
way onnx-graphsurgeon presents them: `node.op/.name/.domain/.attrs/.inputs/.outputs`,
`tensor.name/.inputs` (producers) `/.outputs` (consumers) `/.shape/.dtype`, and
whether a tensor is a constant (an initializer). `ProtoGraph` gives the same
answers from producer/consumer indexes built once, creating node and tensor
views only when the matcher reaches them; importing a 4,000-node graph into
onnx-graphsurgeon costs ~0.27 s, most of which a fusion never looks at.

Decisions (each answer is what onnx-graphsurgeon 0.6.1's importer gives):
- A name is a constant when it is an initializer (initializers win over graph
  inputs of the same name); its shape is its dims, its dtype
  `get_onnx_tensor_dtype` of the TensorProto.
- A variable's dtype and shape come from its first `value_info` entry, else its
  graph input, else its graph output entry (the importer's order, stated once in
  `gs_export.ValueInfos`, which the export also writes from); none: None.
- Producers and consumers are listed in node order, once per output/input slot.
- An empty name (an omitted optional input/output) is a fresh tensor per use,
  as graphsurgeon's `Variable.empty()`: it never equals another.
- Attributes are imported as graphsurgeon does for the types it knows (INT,
  FLOAT, STRING, TENSOR, and their lists); a TENSOR attribute is a constant
  view. The caller keeps graphs with subgraph attributes out of scope.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper
from onnx_graphsurgeon.importers.onnx_importer import get_onnx_tensor_dtype, get_onnx_tensor_shape

from trtpipe.graph.onnx_gs.gs_export import ValueInfos
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, tensor_array


class TensorView:
    """A graph tensor as graphsurgeon shows it (see module docstring)."""

    is_initializer = False

    def __init__(self, graph: ProtoGraph | None, name: str) -> None:
        self._graph = graph
        self.name = name
        self._inputs: list | None = None
        self._outputs: list | None = None
        self._shape = self._dtype = _UNREAD

    @property
    def inputs(self) -> list[NodeView]:
        if self._inputs is None:
            graph = self._graph
            self._inputs = [graph.node(i) for i in graph.producers.get(self.name, ())] if self.name else []
        return self._inputs

    @property
    def outputs(self) -> list[NodeView]:
        if self._outputs is None:
            graph = self._graph
            self._outputs = [graph.node(i) for i in graph.consumers.get(self.name, ())] if self.name else []
        return self._outputs

    @property
    def shape(self):
        """Read once, as the importer sets it once (a new list each time: callers may keep it)."""
        if self._shape is _UNREAD:
            info = self._typed()
            self._shape = None if info is None else get_onnx_tensor_shape(info)
        return None if self._shape is None else list(self._shape)

    @property
    def dtype(self):
        if self._dtype is _UNREAD:
            info = self._typed()
            self._dtype = None if info is None else get_onnx_tensor_dtype(info)
        return self._dtype

    def _typed(self) -> onnx.ValueInfoProto | None:
        info = self._graph.type_source(self.name) if self.name else None
        return None if info is None or info.type.ByteSize() == 0 else info


class ConstantView(TensorView):
    """An initializer (or a TENSOR attribute's value): graphsurgeon's `Constant` with `LazyValues`."""

    is_initializer = True

    def __init__(self, graph: ProtoGraph | None, proto: onnx.TensorProto, name: str | None = None) -> None:
        super().__init__(graph, proto.name if name is None else name)
        self.proto = proto
        self._values: np.ndarray | None = None

    @property
    def inputs(self) -> list[NodeView]:
        return [] if self._graph is None else super().inputs

    @property
    def outputs(self) -> list[NodeView]:
        return [] if self._graph is None else super().outputs

    @property
    def shape(self):
        return tuple(self.proto.dims)

    @property
    def dtype(self):
        return get_onnx_tensor_dtype(self.proto)

    @property
    def values(self) -> np.ndarray:
        """Read once and kept, as graphsurgeon's `Constant.values` keeps what `LazyValues` loaded."""
        if self._values is None:
            # gs reads with numpy_helper.to_array, which refuses an anchored file (weights_on_disk.py).
            if is_on_disk(self.proto):
                self._values = tensor_array(self.proto)
            else:  # LazyValues.load, without its per-call dtype lookups
                self._values = np.array(numpy_helper.to_array(self.proto))
        return self._values


class NodeView:
    """A node as graphsurgeon shows it; `index` is its position in the graph's node list."""

    def __init__(self, graph: ProtoGraph, index: int) -> None:
        proto = graph.nodes[index]
        self._graph = graph
        self.index = index
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name
        self.domain = proto.domain if proto.HasField("domain") else None
        self._inputs: list | None = None
        self._outputs: list | None = None
        self._attrs: dict | None = None

    @property
    def inputs(self) -> list[TensorView]:
        if self._inputs is None:
            graph = self._graph
            self._inputs = [graph.tensor(name) if name else graph.empty_tensor(consumer=self)
                            for name in graph.node_inputs[self.index]]
        return self._inputs

    @property
    def outputs(self) -> list[TensorView]:
        if self._outputs is None:
            graph = self._graph
            self._outputs = [graph.tensor(name) if name else graph.empty_tensor(producer=self)
                             for name in self.proto.output]
        return self._outputs

    @property
    def attrs(self) -> dict:
        if self._attrs is None:
            self._attrs = {attribute.name: value for attribute in self.proto.attribute
                           if (value := _attribute_value(attribute)) is not _SKIPPED}
        return self._attrs


class ProtoGraph:
    """Producer/consumer indexes of a main graph and lazily created gs-like views of it."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.model = model
        self.nodes = list(graph.node)
        self.node_inputs = [list(node.input) for node in self.nodes]
        self.initializers: dict[str, onnx.TensorProto] = {}
        for tensor in graph.initializer:
            self.initializers.setdefault(tensor.name, tensor)
        self._value_info = ValueInfos(graph, self.initializers)  # the importer's precedence
        self.producers: dict[str, list[int]] = {}
        self.consumers: dict[str, list[int]] = {}
        self.by_op: dict[str, list[int]] = {}
        for index, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producers.setdefault(name, []).append(index)
            for name in self.node_inputs[index]:
                if name:
                    self.consumers.setdefault(name, []).append(index)
            self.by_op.setdefault(node.op_type, []).append(index)
        self._node_views: dict[int, NodeView] = {}
        self._tensor_views: dict[str, TensorView] = {}

    def node(self, index: int) -> NodeView:
        view = self._node_views.get(index)
        if view is None:
            view = self._node_views[index] = NodeView(self, index)
        return view

    def tensor(self, name: str) -> TensorView:
        view = self._tensor_views.get(name)
        if view is None:
            proto = self.initializers.get(name)
            view = TensorView(self, name) if proto is None else ConstantView(self, proto)
            self._tensor_views[name] = view
        return view

    def empty_tensor(self, *, consumer: NodeView | None = None, producer: NodeView | None = None) -> TensorView:
        empty = TensorView(self, "")
        empty._inputs = [producer] if producer is not None else []
        empty._outputs = [consumer] if consumer is not None else []
        return empty

    def type_source(self, name: str) -> onnx.ValueInfoProto | None:
        return self._value_info.source(name)


_SKIPPED = object()
_UNREAD = object()
_SIMPLE = {
    onnx.AttributeProto.FLOAT: lambda a: a.f,
    onnx.AttributeProto.INT: lambda a: a.i,
    onnx.AttributeProto.STRING: lambda a: a.s.decode(),
    onnx.AttributeProto.TENSOR: lambda a: ConstantView(None, a.t),
    onnx.AttributeProto.FLOATS: lambda a: list(a.floats),
    onnx.AttributeProto.INTS: lambda a: list(a.ints),
    onnx.AttributeProto.STRINGS: lambda a: [s.decode() for s in a.strings],
}


def _attribute_value(attribute: onnx.AttributeProto):
    reader = _SIMPLE.get(attribute.type)
    return _SKIPPED if reader is None or attribute.ref_attr_name else reader(attribute)
