"""One constant-folding pass on the ModelProto, written exactly as Polygraphy's pass would write it.

sanitize's first folding pass is Polygraphy's `fold_constants(num_passes=1,
partitioning=None, fold_shapes=True, error_ok=True)`: import into
onnx-graphsurgeon 0.6.1, `Graph.fold_constants`, `cleanup()`, `export_onnx`,
ONNX shape inference. On a 48-layer encoder that round trip is 1.0 s of
sanitize's 1.7 s, although all it does there is lower 1,159 Constant nodes to
initializers and fold one Gather. `fold_pass` computes the same model on the
protos directly (graphsurgeon's rules are summarised in fold_check.py):

- Constant nodes (`value` attribute) become initializers named after their
  output (the attribute's tensor, renamed);
- a node whose non-empty inputs are all constant (not Q/DQ) is foldable; the
  Shape/Gather/Slice passes (gather, then slice, then shape, each followed by
  a new foldable walk) turn shapes of statically known dims into constants;
- every foldable tensor graphsurgeon would evaluate (its consumers' *node
  names* are not constant tensor names, or it has none) is computed in one
  ONNX Runtime session, default options as graphsurgeon's, and written with
  `onnx.helper.make_tensor(raw=True)`;
- the producers lose the folded outputs, `cleanup()` keeps what the graph
  outputs need, and the export lists nodes in order, initializers and
  value_info in first-use order (inputs, each node's inputs and outputs,
  outputs), value infos rebuilt with `make_tensor_value_info`;
- graphsurgeon's side effects on the input model are repeated: every tensor
  attribute it exports gets an explicit name, and a lowered Constant's tensor
  takes its output's name (the model as given to the pass is what an undone
  pass continues with).

Decision: anything outside what is reproduced here returns None and the
caller runs Polygraphy's pass as before: model-local functions, sparse
initializers, any node with a graph-valued or otherwise unusual attribute
(If/Loop/Scan bodies, attribute references, empty lists, doc strings), a
custom-domain node that graphsurgeon treats specially or that would fold, a
domain missing from the opset imports, a Constant other than `value=tensor`,
shape-tensor Cast elision candidates, duplicate producers or value infos,
a graph output or input that is or becomes a constant, a foldable node with
an omitted output or random values, a tensor over the size threshold, values
on disk, non-tensor types, any irregularity where graphsurgeon's own code
would raise, and any ONNX Runtime failure. tests/graph/test_fast_fold.py and
bench/same_output.py compare both paths byte for byte.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.graph.domains import DEFAULT_DOMAINS
from trtpipe.graph.fold_check import CAST_ELISION_OPS, NEVER_FOLDED, cast_elision_candidate
from trtpipe.graph.weights_on_disk import is_on_disk

logger = logging.getLogger(__name__)

# Switch for the differential check (bench/same_output.py, tests): False runs Polygraphy's pass only.
ENABLED = True

NODE_FIELDS = frozenset({"input", "output", "name", "op_type", "domain", "attribute"})
VALUE_FIELDS = {onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
                onnx.AttributeProto.TENSOR: "t", onnx.AttributeProto.FLOATS: "floats",
                onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.STRINGS: "strings"}
# Op types graphsurgeon's folding looks at by name whatever their domain.
GS_SPECIAL_OPS = frozenset({"Constant", "Shape", "Gather", "Slice", "Cast", "If"}) | NEVER_FOLDED | CAST_ELISION_OPS
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})
# Element types whose values are read or written here (ONNX Runtime results, graphsurgeon's itemsize).
PLAIN_TYPES = {TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
               TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
               TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8}
# Types graphsurgeon's import sizes without raising (its LazyValues computes every constant's nbytes).
GS_SIZED_TYPES = frozenset(PLAIN_TYPES) | {TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
                                           TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                                           TensorProto.FLOAT8E5M2FNUZ, TensorProto.UINT4, TensorProto.INT4}


class OutOfScope(Exception):
    """The model needs Polygraphy's own pass; the message says why."""


def fold_pass(model: onnx.ModelProto, *, infer_shapes: bool, size_threshold: int) -> onnx.ModelProto | None:
    """Polygraphy's one folding pass (see the module docstring) without the round trip; None when out of scope."""
    if not ENABLED:
        return None
    try:
        return _Fold(model, size_threshold).run(infer_shapes)
    except OutOfScope as reason:
        logger.debug("fast constant folding not used (%s): Polygraphy's pass runs", reason)
        return None


class _Fold:
    def __init__(self, model: onnx.ModelProto, size_threshold: int):
        self.model, self.graph, self.threshold = model, model.graph, size_threshold
        self._scope()

    # -- what graphsurgeon imports -------------------------------------------------------------

    def _scope(self) -> None:
        model, graph = self.model, self.graph
        _require(not model.functions and not graph.sparse_initializer, "functions or sparse initializers")
        self.initializers = {}
        for tensor in graph.initializer:
            _require(tensor.name and tensor.name not in self.initializers, "unnamed or duplicate initializer")
            _require(tensor.data_type in GS_SIZED_TYPES, "an initializer of an unusual type")
            self.initializers[tensor.name] = tensor
        self.inputs = [value for value in graph.input if value.name not in self.initializers]
        self.info = {}  # tensor name -> (elem_type, dims or None) or None: graphsurgeon's Variable dtype/shape
        for value in [*graph.value_info, *self.inputs, *graph.output]:
            _require(value.name not in self.info and value.name not in self.initializers,
                     f"tensor {value.name!r} described twice")
            self.info[value.name] = _type_info(value)
        domains = {opset.domain for opset in model.opset_import}
        self.producer: dict[str, int] = {}
        self.lowered: dict[str, onnx.NodeProto] = {}
        input_names = {value.name for value in self.inputs}
        for index, node in enumerate(graph.node):
            _check_node(node)
            if node.HasField("domain"):
                _require(node.domain in domains, f"domain {node.domain!r} is not imported")
                _require(node.domain in DEFAULT_DOMAINS or node.op_type not in GS_SPECIAL_OPS,
                         f"custom-domain {node.op_type}")
            for name in node.output:
                if name:
                    _require(name not in self.producer and name not in self.initializers and name not in input_names,
                             f"tensor {name!r} has two producers")
                    self.producer[name] = index
            if node.op_type == "Constant":
                self.lowered[_constant_output(node)] = node
        outputs = [value.name for value in graph.output]
        _require(len(set(outputs)) == len(outputs), "duplicate graph outputs")
        _require(not any(name in self.initializers or name in self.lowered or name in input_names for name in outputs),
                 "a graph output is a constant or a graph input")
        self.consumers: dict[str, list[int]] = {}
        for index, node in enumerate(graph.node):
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(index)
        self._refuse_cast_elision()
        self.order = _tensor_order(graph, self.inputs)

    def _refuse_cast_elision(self) -> None:
        nodes = self.graph.node
        producers = {name: nodes[i] for name, i in self.producer.items() if name not in self.lowered}
        consumers = {name: [nodes[i] for i in readers] for name, readers in self.consumers.items()}
        outputs = {value.name for value in self.graph.output}
        for node in nodes:
            if node.op_type in CAST_ELISION_OPS:
                _require(not cast_elision_candidate(node, producers, consumers, outputs), "a Cast elision candidate")

    # -- graphsurgeon's fold_constants -----------------------------------------------------------

    def run(self, infer_shapes: bool) -> onnx.ModelProto:
        self.constants = set(self.initializers) | set(self.lowered)  # graphsurgeon Constants in its graph copy
        self.shape_values: dict[str, np.ndarray] = {}
        self.foldable = set(self.constants)
        self._walk_foldable()
        for fold in (self._shape_gather, self._shape_slice, self._shape):
            for name in self.order:
                if name in self.constants:
                    continue
                try:
                    value = fold(name)
                except OutOfScope:
                    raise
                except Exception as error:  # graphsurgeon would abandon this routine half-way: its own pass
                    raise OutOfScope(f"shape folding raised {type(error).__name__}") from error
                if value is not None:
                    self.shape_values[name] = value
                    self.constants.add(name)
                    self.foldable.add(name)
            self._walk_foldable()
        evaluated = self._evaluate(self._to_evaluate())
        folded = {name: _raw_tensor(name, value) for name, value in {**self.shape_values, **evaluated}.items()}
        model = self._export(folded)
        if infer_shapes:
            from polygraphy.backend.onnx import infer_shapes as polygraphy_infer_shapes

            model = polygraphy_infer_shapes(model, allow_onnxruntime=False)
        return model

    def _walk_foldable(self) -> None:
        for node in self.graph.node:
            if node.op_type == "Constant" or node.op_type in NEVER_FOLDED:
                continue
            if all(name in self.foldable for name in node.input if name):
                _require(all(node.output), "a foldable node with an omitted output")
                self.foldable.update(node.output)

    def _producer_of(self, name: str, op_type: str) -> onnx.NodeProto | None:
        if name in self.constants or name not in self.producer:
            return None
        node = self.graph.node[self.producer[name]]
        return node if node.op_type == op_type else None

    def _shape_input(self, name: str) -> list | None:
        """Dims of the tensor a Shape producing `name` reads, when graphsurgeon would fold on them."""
        shape = self._producer_of(name, "Shape")
        if shape is None:
            return None
        source = shape.input[0]
        if source in self.foldable:
            return None
        info = self.info.get(source)
        return None if info is None else info[1]

    def _value(self, name: str) -> np.ndarray:
        if name in self.shape_values:
            return self.shape_values[name]
        tensor = self.initializers[name] if name in self.initializers else _constant_tensor(self.lowered[name])
        _require(not is_on_disk(tensor) and tensor.data_type in PLAIN_TYPES, "a constant read here is not plain")
        return np.array(numpy_helper.to_array(tensor))

    def _shape_gather(self, name: str) -> np.ndarray | None:
        gather = self._producer_of(name, "Gather")
        if gather is None:
            return None
        data, indices = gather.input[0], gather.input[1]
        dims = self._shape_input(data)
        if dims is None or indices not in self.constants:
            return None
        values = self._value(indices)
        if not values.shape:
            dim = dims[int(values)]
            return None if _dynamic(dim) else np.array(dim, dtype=np.int64)
        picked = [dims[index] for index in values]
        return None if any(_dynamic(dim) for dim in picked) else np.array(picked, dtype=np.int64)

    def _shape_slice(self, name: str) -> np.ndarray | None:
        node = self._producer_of(name, "Slice")
        if node is None:
            return None
        inputs, attributes = list(node.input), {a.name: list(a.ints) for a in node.attribute}
        data = inputs[0]  # graphsurgeon reads it first: a Slice without inputs raises there
        if len(inputs) >= 3:
            if not all(part in self.constants for part in inputs[1:3]):
                return None
            starts, ends = self._scalar(inputs[1]), self._scalar(inputs[2])
        elif "starts" in attributes and "ends" in attributes:
            starts, ends = attributes["starts"][0], attributes["ends"][0]
        else:
            return None
        dims = self._shape_input(data)
        if dims is None:
            return None
        if len(inputs) > 3:
            if inputs[3] not in self.constants or self._scalar(inputs[3]) != 0:
                return None
        elif "axes" in attributes and attributes["axes"][0] != 0:
            return None
        steps = 1
        if len(inputs) > 4:
            if inputs[4] not in self.constants:
                return None
            steps = self._scalar(inputs[4])
        elif "steps" in attributes:
            steps = attributes["steps"][0]
        picked = dims[starts:ends:steps]
        return None if any(_dynamic(dim) for dim in picked) else np.array(picked, dtype=np.int64)

    def _shape(self, name: str) -> np.ndarray | None:
        dims = self._shape_input(name)
        return None if dims is None or any(_dynamic(dim) for dim in dims) else np.array(dims, dtype=np.int64)

    def _scalar(self, name: str):
        values = self._value(name)
        return values if not values.shape else list(values)[0]

    def _to_evaluate(self) -> list[str]:
        """The foldable tensors graphsurgeon computes (`should_eval_foldable`)."""
        nodes = self.graph.node
        wanted = []
        for name in self.foldable - self.constants:
            readers = self.consumers.get(name, [])
            if readers and all(nodes[i].name in self.foldable for i in readers):
                continue
            info = self.info.get(name)
            if info is not None and info[1] is not None and not any(_dynamic(dim) for dim in info[1]):
                _require(info[0] in PLAIN_TYPES, "a foldable tensor of an unusual type")
                _require(int(np.prod(info[1], dtype=np.int64)) * PLAIN_TYPES[info[0]] <= self.threshold,
                         "a foldable tensor over the size threshold")
            wanted.append(name)
        return sorted(wanted, key=self.producer.__getitem__)

    def _evaluate(self, names: list[str]) -> dict[str, np.ndarray]:
        """`names` computed in one ONNX Runtime session, as graphsurgeon's graph copy would be."""
        if not names:
            return {}
        nodes = self.graph.node
        needed, pending, seen = set(), list(names), set(names)
        while pending:
            name = pending.pop()
            if name in self.constants:
                continue
            index = self.producer[name]
            needed.add(index)
            for source in nodes[index].input:
                if source and source not in seen:
                    seen.add(source)
                    pending.append(source)
        chosen = [nodes[i] for i in sorted(needed)]
        for node in chosen:
            _require(node.domain in DEFAULT_DOMAINS and node.op_type not in RANDOM_OPS,
                     f"{node.op_type} would be evaluated")
        read = list(dict.fromkeys(name for node in chosen for name in node.input if name in self.constants))
        for name in read:
            _require(name not in self.initializers or not is_on_disk(self.initializers[name]), "a weight on disk")
        constants = [self._constant_proto(name) for name in read]
        outputs = set(names)
        value_info = [_value_info(name, self.info[name]) for name in _tensor_order_of([], chosen, [])
                      if name not in self.constants and name not in outputs and self.info.get(name) is not None]
        graph = helper.make_graph(chosen, "fast_fold", [], [_value_info(name, self.info.get(name)) for name in names],
                                  constants, value_info=value_info)
        model = helper.make_model(graph, opset_imports=self.model.opset_import)
        model.ir_version = self.model.ir_version
        import onnxruntime as ort

        from trtpipe.numerics.ort_logging import quiet_onnxruntime

        quiet_onnxruntime()
        try:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            values = session.run(names, {})
        except Exception as error:  # ONNX Runtime's own types; graphsurgeon would fold less
            raise OutOfScope(f"ONNX Runtime could not evaluate the constants: {type(error).__name__}") from error
        for value in values:
            _require(isinstance(value, np.ndarray) and value.dtype != object and value.nbytes <= self.threshold
                     and helper.np_dtype_to_tensor_dtype(value.dtype) in PLAIN_TYPES, "an unusual folded value")
        self.exported_nodes = chosen
        self.exported_lowered = [name for name in read if name in self.lowered]
        return dict(zip(names, values))

    def _constant_proto(self, name: str) -> onnx.TensorProto:
        if name in self.initializers:
            return self.initializers[name]
        if name in self.shape_values:
            return _raw_tensor(name, self.shape_values[name])
        tensor = TensorProto()
        tensor.CopyFrom(_constant_tensor(self.lowered[name]))
        tensor.name = name
        return tensor

    # -- graphsurgeon's cleanup() and export_onnx ------------------------------------------------

    def _export(self, folded: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
        graph, nodes = self.graph, self.graph.node
        gone = set(folded) | set(self.lowered)
        _require(not any(value.name in gone for value in graph.output), "a graph output would become a constant")
        used, pending = set(), [value.name for value in graph.output]
        kept = set()
        while pending:
            name = pending.pop()
            if name in used:
                continue
            used.add(name)
            if name in gone or name not in self.producer:
                continue
            index = self.producer[name]
            if index not in kept:
                kept.add(index)
                pending.extend(source for source in nodes[index].input if source)
        kept_nodes = [nodes[i] for i in sorted(kept)]
        # graphsurgeon drops a folded output from its producer's output list (the others shift): never kept here.
        _require(not any(name in gone for node in kept_nodes for name in node.output), "a kept node loses an output")
        names = _tensor_order_of(self.inputs, kept_nodes, graph.output)
        initializer = [folded[name] if name in folded else self._constant_proto(name)
                       for name in names if name in self.initializers or name in gone]
        io_names = {value.name for value in self.inputs} | {value.name for value in graph.output}
        value_info = [_value_info(name, self.info[name]) for name in names
                      if name not in io_names and name not in gone and name not in self.initializers
                      and self.info.get(name) is not None]
        exported_nodes = [*getattr(self, "exported_nodes", []), *kept_nodes]
        exported_lowered = [*getattr(self, "exported_lowered", []), *(n for n in names if n in self.lowered)]
        _repeat_side_effects(exported_nodes, {name: self.lowered[name] for name in exported_lowered})
        result_graph = helper.make_graph(
            kept_nodes, graph.name, [_value_info(v.name, self.info[v.name]) for v in self.inputs],
            [_value_info(v.name, self.info[v.name]) for v in graph.output], initializer,
            doc_string=graph.doc_string, value_info=value_info, sparse_initializer=[])
        model = helper.make_model(result_graph, functions=[], opset_imports=self.model.opset_import)
        model.producer_name = self.model.producer_name
        model.producer_version = self.model.producer_version
        model.ir_version = self.model.ir_version
        return model


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise OutOfScope(reason)


def _check_node(node: onnx.NodeProto) -> None:
    """A node graphsurgeon's import and export write back unchanged (but for tensor names, see below)."""
    fields = {field.name for field, _ in node.ListFields()}
    _require(fields <= NODE_FIELDS and "op_type" in fields, f"node fields {sorted(fields - NODE_FIELDS)}")
    _require(not node.HasField("name") or node.name, "a node with an explicitly empty name")
    for attribute in node.attribute:
        value_field = VALUE_FIELDS.get(attribute.type)
        present = {field.name for field, _ in attribute.ListFields()}
        _require(value_field is not None and present == {"name", "type", value_field},
                 f"attribute {attribute.name!r} of {node.op_type}")
        if attribute.type == onnx.AttributeProto.STRING:
            _utf8(attribute.s)
        elif attribute.type == onnx.AttributeProto.STRINGS:
            for text in attribute.strings:
                _utf8(text)
        elif attribute.type == onnx.AttributeProto.TENSOR:
            _require(not is_on_disk(attribute.t) and attribute.t.data_type in GS_SIZED_TYPES,
                     "a tensor attribute on disk or of an unusual type")


def _utf8(text: bytes) -> None:
    try:
        text.decode()
    except UnicodeDecodeError as error:
        raise OutOfScope("a string attribute that is not UTF-8") from error


def _constant_output(node: onnx.NodeProto) -> str:
    _require(node.domain in DEFAULT_DOMAINS, "a custom-domain Constant")
    _require(len(node.attribute) == 1 and node.attribute[0].name == "value"
             and node.attribute[0].type == onnx.AttributeProto.TENSOR, "a Constant other than value=tensor")
    _require(len(node.output) == 1 and node.output[0], "a Constant without exactly one output")
    return node.output[0]


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto:
    return node.attribute[0].t


def _type_info(value: onnx.ValueInfoProto) -> tuple[int, list | None] | None:
    """graphsurgeon's dtype and shape of a tensor typed by `value` (None: neither)."""
    if value.type.ByteSize() == 0:
        return None
    _require(value.type.WhichOneof("value") == "tensor_type", f"{value.name!r} is not a tensor")
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return tensor_type.elem_type, None
    dims = []
    for dim in tensor_type.shape.dim:
        kind = dim.WhichOneof("value")
        dims.append(dim.dim_param if kind == "dim_param" else dim.dim_value if kind == "dim_value" else None)
    return tensor_type.elem_type, dims


def _value_info(name: str, info: tuple[int, list | None] | None) -> onnx.ValueInfoProto:
    if info is None:
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(name, info[0], info[1])


def _dynamic(dim) -> bool:
    return not isinstance(dim, int) or dim < 0


def _raw_tensor(name: str, values: np.ndarray) -> onnx.TensorProto:
    return helper.make_tensor(name=name, data_type=helper.np_dtype_to_tensor_dtype(values.dtype),
                              dims=values.shape, vals=values.tobytes(), raw=True)


def _tensor_order(graph: onnx.GraphProto, inputs) -> list[str]:
    return _tensor_order_of(inputs, graph.node, graph.output)


def _tensor_order_of(inputs, nodes, outputs) -> list[str]:
    """graphsurgeon's `Graph.tensors()` order: graph inputs, each node's inputs then outputs, graph outputs."""
    names = [value.name for value in inputs]
    for node in nodes:
        names.extend(node.input)
        names.extend(node.output)
    names.extend(value.name for value in outputs)
    return [name for name in dict.fromkeys(names) if name]


def _repeat_side_effects(nodes, lowered: dict[str, onnx.NodeProto]) -> None:
    """What graphsurgeon's exports write into the input model's protos (see the module docstring)."""
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                attribute.t.name = attribute.t.name
    for name, node in lowered.items():
        _constant_tensor(node).name = name
