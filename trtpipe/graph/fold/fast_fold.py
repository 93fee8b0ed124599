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
- a node whose non-empty inputs are all constant (not Q/DQ) is foldable unless
  the growth rule excludes it (growth.py, as onnx-graphsurgeon's
  `should_exclude_node` does in gs_fold.py's passes, on the same sizes); the
  Shape/Gather/Slice passes (gather, then slice, then shape, each followed by
  a new foldable walk) turn shapes of statically known dims into constants;
- every foldable tensor graphsurgeon would evaluate (its consumers' *node
  names* are not names of the constants `Graph.tensors()` reaches, or it has
  none) is computed in one
  ONNX Runtime session, default options as graphsurgeon's, and written with
  `onnx.helper.make_tensor(raw=True)`;
- the producers lose the folded outputs, `cleanup()` keeps what the graph
  outputs need, and the export lists nodes in order, initializers and
  value_info in first-use order (inputs, each node's inputs and outputs,
  outputs), nodes and value infos as graphsurgeon re-makes them (gs_export.py,
  shared with the LayerNorm fusion);
- shape inference as Polygraphy runs it after the pass, on a weightless copy
  (value_info.infer_shapes: same value_info and output types);
- graphsurgeon's side effects on the input model are repeated: every tensor
  attribute it exports gets an explicit name, and a lowered Constant's tensor
  takes its output's name (the model as given to the pass is what an undone
  pass continues with).

Decision: anything outside what is reproduced here returns None and the
caller runs Polygraphy's pass as before: model-local functions, sparse
initializers, any node with a graph-valued or otherwise unusual attribute
(If/Loop/Scan bodies, attribute references, empty lists, non-UTF-8 strings,
attribute types graphsurgeon's importer skips: the node it evaluates would
lack them), a custom-domain node that graphsurgeon treats specially or that
would fold, a domain missing from the opset imports, a Constant other than
`value=tensor`, shape-tensor Cast elision candidates, duplicate producers or
value infos, an initializer also described by a value info or graph output,
a graph output or input that is or becomes a constant, a foldable node with
an omitted output or random values, a tensor over the size threshold, values
on disk, non-tensor types, any irregularity where graphsurgeon's own code
would raise (gs_export.OutOfScope), any ONNX Runtime failure, and (logged as
a warning) any error of its own.

Decision: a kept node that graphsurgeon writes back re-made (a doc string, an
explicitly empty name, an attribute with a doc string or without its value)
is written re-made (gs_export.exported_node), not refused: the rule the
LayerNorm fusion already used, now shared. tests/graph/test_fast_fold.py and
bench/same_output/same_output.py compare both paths byte for byte.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe.errors import is_out_of_memory
from trtpipe.onnxmodel import value_info
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.graph.fold.fold_check import CAST_ELISION_OPS, NEVER_FOLDED, RANDOM_OPS
from trtpipe.graph.fold.growth import GrowthRule, Unfolded, tensor_bytes
from trtpipe.graph.onnx_gs.gs_export import (GS_SIZED_TYPES, VALUE_FIELDS, OutOfScope, ValueInfos, check_node,
                                     exported_model, exported_node, repeat_side_effects, require, tensor_order)
from trtpipe.graph.fold.shape_folding import PLAIN_TYPES, ShapeFolding, dynamic_dim
from trtpipe.onnxmodel.weights_on_disk import is_on_disk

logger = logging.getLogger(__name__)

# Switch for the differential check (bench/same_output/same_output.py, tests): False runs Polygraphy's pass only.
ENABLED = True

# Op types graphsurgeon's folding looks at by name whatever their domain.
GS_SPECIAL_OPS = frozenset({"Constant", "Shape", "Gather", "Slice", "Cast", "If"}) | NEVER_FOLDED | CAST_ELISION_OPS
# What graphsurgeon's fold_shape_gather/fold_shape_slice raise on the values they index and slice with.
GS_SHAPE_FOLDING_ERRORS = (IndexError, TypeError, ValueError, OverflowError)
FLOAT_TO = 1  # Cast's `to` for FLOAT, as graphsurgeon's cast elision compares it


def fold_pass(model: onnx.ModelProto, *, infer_shapes: bool, size_threshold: int, growth: GrowthRule | None = None,
              unfolded: Unfolded | None = None) -> onnx.ModelProto | None:
    """Polygraphy's one folding pass (see the module docstring) without the round trip; None when out of scope.

    With `growth`, a node the growth rule excludes is not folded (growth.py: graphsurgeon's
    `should_exclude_node` as gs_fold.py hands it over) and is recorded into `unfolded`.
    """
    if not ENABLED:
        return None
    try:
        # The growth state changes only when the pass succeeds: otherwise graphsurgeon's pass starts from it.
        state = (unfolded or Unfolded()).copy()
        result = _Fold(model, size_threshold, growth, state).run(infer_shapes)
        if unfolded is not None:
            unfolded.update(state)
        return result
    except OutOfScope as reason:
        logger.debug("fast constant folding not used (%s): Polygraphy's pass runs", reason)
    except Exception as error:  # noqa: BLE001 - a defect here must cost speed, never the folding
        if is_out_of_memory(error):  # the machine's limit: the other pass would run out too, or fold less
            raise
        # Decision: Polygraphy's pass then runs as before (what the fast path may already have written into
        # the input model is what that pass writes too). Logged with the traceback for a report.
        logger.warning("fast constant folding failed (%s: %s); Polygraphy's pass runs instead",
                       type(error).__name__, error, exc_info=logger.isEnabledFor(logging.DEBUG))
    return None


class _Fold(ShapeFolding):
    def __init__(self, model: onnx.ModelProto, size_threshold: int, growth: GrowthRule | None, unfolded: Unfolded):
        self.model, self.graph, self.threshold = model, model.graph, size_threshold
        self.growth, self.unfolded = growth, unfolded
        self._import()

    # -- what graphsurgeon imports -------------------------------------------------------------

    def _import(self) -> None:
        model, graph = self.model, self.graph
        require(not model.functions and not graph.sparse_initializer, "functions or sparse initializers")
        self.initializers = {}
        for tensor in graph.initializer:
            require(tensor.name and tensor.name not in self.initializers, "unnamed or duplicate initializer")
            require(tensor.data_type in GS_SIZED_TYPES, "an initializer of an unusual type")
            self.initializers[tensor.name] = tensor
        self.input_names = [value.name for value in graph.input if value.name not in self.initializers]
        self.output_names = [value.name for value in graph.output]
        for value in [*graph.value_info, *graph.output]:
            require(value.name not in self.initializers, f"initializer {value.name!r} also described")
        self.values = ValueInfos(graph, self.initializers)  # graphsurgeon's Variable dtype/shape
        domains = {opset.domain for opset in model.opset_import}
        self.nodes = list(graph.node)
        self.ops, self.ins, self.outs, self.names = [], [], [], []
        self.producer: dict[str, int] = {}
        self.lowered: dict[str, onnx.NodeProto] = {}
        inputs_set = set(self.input_names)
        for index, node in enumerate(self.nodes):
            op, outs = node.op_type, list(node.output)
            # A Constant is lowered and its node removed: only what the lowering reads is checked.
            _check_constant(node) if op == "Constant" else _check_node(node)
            self.ops.append(op)
            self.ins.append(list(node.input))
            self.outs.append(outs)
            self.names.append(node.name)
            if node.HasField("domain"):
                require(node.domain in domains, f"domain {node.domain!r} is not imported")
                require(node.domain in DEFAULT_DOMAINS or op not in GS_SPECIAL_OPS, f"custom-domain {op}")
            for name in outs:
                if name:
                    require(name not in self.producer and name not in self.initializers and name not in inputs_set,
                            f"tensor {name!r} has two producers")
                    self.producer[name] = index
            if op == "Constant":
                self.lowered[_constant_output(node)] = node
        outputs = self.output_names
        require(len(set(outputs)) == len(outputs), "duplicate graph outputs")
        require(not any(name in self.initializers or name in self.lowered or name in inputs_set for name in outputs),
                "a graph output is a constant or a graph input")
        self.consumers: dict[str, list[int]] = {}
        for index, inputs_of in enumerate(self.ins):
            for name in inputs_of:
                if name:
                    self.consumers.setdefault(name, []).append(index)
        self._refuse_cast_elision()
        self.order = tensor_order(self.input_names, self.ins, self.outs, outputs)

    def _refuse_cast_elision(self) -> None:
        """Out of scope when graphsurgeon's shape-tensor Cast elision might rewrite a node (fold_check.py)."""
        outputs = set(self.output_names)
        for index, op in enumerate(self.ops):
            if op not in CAST_ELISION_OPS:
                continue
            if any(name in outputs or any(self.ops[reader] != "Cast" for reader in self.consumers.get(name, ()))
                   for name in self.outs[index]):
                continue
            for name in self.ins[index]:
                source = self.producer.get(name)
                if source is not None and self.ops[source] == "Cast" and any(
                        a.name == "to" and a.i == FLOAT_TO for a in self.nodes[source].attribute):
                    raise OutOfScope("a Cast elision candidate")

    # -- graphsurgeon's fold_constants -----------------------------------------------------------

    def run(self, infer_shapes: bool) -> onnx.ModelProto:
        self.constants = set(self.initializers) | set(self.lowered)  # graphsurgeon Constants in its graph copy
        self.shape_values: dict[str, np.ndarray] = {}
        self.foldable = set(self.constants)
        self._walk_foldable()
        for fold in (self._shape_gather, self._shape_slice, self._shape):
            before = len(self.shape_values)
            for name in self.order:
                if name in self.constants:
                    continue
                try:
                    value = fold(name)
                except GS_SHAPE_FOLDING_ERRORS as error:
                    # graphsurgeon's routine raises these too (an index out of the dims, a non-integer index
                    # or bound, a zero step, an empty bound) and is abandoned half-way: its own pass runs.
                    # Anything else is a defect here and reaches fold_pass's warning.
                    raise OutOfScope(f"shape folding raised {type(error).__name__}") from error
                if value is not None:
                    self.shape_values[name] = value
                    self.constants.add(name)
                    self.foldable.add(name)
            if len(self.shape_values) != before:  # otherwise the walk would find what it found before
                self._walk_foldable()
        self.exported_nodes, self.exported_lowered = [], []
        evaluated = self._evaluate(self._to_evaluate())
        folded = {name: _raw_tensor(name, value) for name, value in {**self.shape_values, **evaluated}.items()}
        model = self._export(folded)
        if infer_shapes:
            # Decision: Polygraphy infers on the whole exported model; value_info.infer_shapes gives the same
            # value_info and output types from a weightless copy (shape inference reads no weight's values),
            # without serialising the weights twice (bench/same_output/same_output.py compares the bytes).
            value_info.infer_shapes(model)
        return model

    def _walk_foldable(self) -> None:
        foldable = self.foldable
        for index, (op, inputs, outputs) in enumerate(zip(self.ops, self.ins, self.outs)):
            if op == "Constant" or op in NEVER_FOLDED:
                continue
            if all(name in foldable for name in inputs if name):
                require(all(outputs), "a foldable node with an omitted output")
                if self.growth is not None and self._excluded(index):
                    continue
                foldable.update(outputs)

    def _excluded(self, index: int) -> bool:
        """graphsurgeon's `should_exclude_node` with growth.gs_excluder, on the sizes its graph copy has."""
        sources = frozenset().union(*(self._sources(name) for name in self.ins[index] if name))
        return self.unfolded.decide(self.growth, self.names[index], self.ops[index], self.outs[index], sources,
                                    [self._variable_bytes(name) for name in self.outs[index]])

    def _sources(self, name: str) -> frozenset:
        if name in self.constants:
            return self.unfolded.constant_sources(name, lambda: self._constant_bytes(name))
        known = self.unfolded.sources.get(name)
        if known is not None:  # a foldable output decided already (nodes are walked in order)
            return known
        require(name in self.producer, f"foldable tensor {name!r} without a producer")
        return frozenset().union(*(self._sources(source) for source in self.ins[self.producer[name]] if source))

    def _constant_bytes(self, name: str) -> int | None:
        if name in self.shape_values:
            return self.shape_values[name].nbytes
        tensor = self.initializers[name] if name in self.initializers else self.lowered[name].attribute[0].t
        return tensor_bytes(tensor.data_type, list(tensor.dims))

    def _variable_bytes(self, name: str) -> int | None:
        info = self.values.get(name)
        return None if info is None else tensor_bytes(info[0], info[1])

    def _to_evaluate(self) -> list[str]:
        """The foldable tensors graphsurgeon computes (`should_eval_foldable`)."""
        wanted = []
        for name in self.foldable - self.constants:
            readers = self.consumers.get(name, [])
            # graphsurgeon compares its consumers' *node* names with the constant tensor names it found in
            # `Graph.tensors()` (graph inputs, node inputs and outputs, graph outputs): an initializer or a
            # lowered Constant no node reads is not among them.
            if readers and all(self._is_constant_tensor_name(self.names[i]) for i in readers):
                continue
            info = self.values.get(name)
            if info is not None and info[1] is not None and not any(dynamic_dim(dim) for dim in info[1]):
                require(info[0] in PLAIN_TYPES, "a foldable tensor of an unusual type")
                require(int(np.prod(info[1], dtype=np.int64)) * PLAIN_TYPES[info[0]] <= self.threshold,
                        "a foldable tensor over the size threshold")
            wanted.append(name)
        return sorted(wanted, key=self.producer.__getitem__)

    def _is_constant_tensor_name(self, name: str) -> bool:
        """`name in graph_constants` in graphsurgeon: a foldable tensor `Graph.tensors()` reaches, i.e. one a
        node reads or a node other than a lowered Constant writes (graph inputs and outputs are never
        constants here: refused at import)."""
        return name in self.foldable and (name in self.consumers
                                          or (name in self.producer and name not in self.lowered))

    def _evaluate(self, names: list[str]) -> dict[str, np.ndarray]:
        """`names` computed in one ONNX Runtime session, as graphsurgeon's graph copy would be."""
        if not names:
            return {}
        needed, pending, seen = set(), list(names), set(names)
        while pending:
            name = pending.pop()
            if name in self.constants:
                continue
            index = self.producer[name]
            needed.add(index)
            for source in self.ins[index]:
                if source and source not in seen:
                    seen.add(source)
                    pending.append(source)
        chosen = sorted(needed)
        for index in chosen:
            require(self.nodes[index].domain in DEFAULT_DOMAINS and self.ops[index] not in RANDOM_OPS,
                    f"{self.ops[index]} would be evaluated")
        order = tensor_order([], [self.ins[i] for i in chosen], [self.outs[i] for i in chosen], [])
        read = [name for name in order if name in self.constants]
        for name in read:
            require(name not in self.initializers or not is_on_disk(self.initializers[name]), "a weight on disk")
        outputs = set(names)
        graph = helper.make_graph(
            [self.nodes[i] for i in chosen], "fast_fold", [], [self.values.proto(name) for name in names],
            [self._constant_proto(name) for name in read],
            value_info=[self.values.proto(name) for name in order
                        if name not in self.constants and name not in outputs and self.values.described(name)])
        model = helper.make_model(graph, opset_imports=self.model.opset_import)
        model.ir_version = self.model.ir_version
        from trtpipe.numerics.ort_logging import cpu_session

        try:
            values = cpu_session(model.SerializeToString()).run(names, {})
        except Exception as error:  # ONNX Runtime's own types; graphsurgeon would fold less
            if is_out_of_memory(error):  # the machine's limit: folding less would cache another output
                raise
            raise OutOfScope(f"ONNX Runtime could not evaluate the constants: {type(error).__name__}") from error
        for value in values:
            require(isinstance(value, np.ndarray) and value.dtype != object and value.nbytes <= self.threshold
                    and helper.np_dtype_to_tensor_dtype(value.dtype) in PLAIN_TYPES, "an unusual folded value")
        self.exported_nodes = [self.nodes[i] for i in chosen]
        self.exported_lowered = [name for name in read if name in self.lowered]
        return dict(zip(names, values))

    def _constant_proto(self, name: str) -> onnx.TensorProto:
        if name in self.initializers:
            return self.initializers[name]
        if name in self.shape_values:
            return _raw_tensor(name, self.shape_values[name])
        tensor = TensorProto()
        tensor.CopyFrom(self.lowered[name].attribute[0].t)
        tensor.name = name
        return tensor

    # -- graphsurgeon's cleanup() and export_onnx ------------------------------------------------

    def _export(self, folded: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
        gone = set(folded) | set(self.lowered)
        # graphsurgeon writes a constant graph output's type from its values: not reproduced here.
        require(not any(name in gone for name in self.output_names), "a graph output becomes a constant")
        kept, used, pending = set(), set(), list(self.output_names)
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
                pending.extend(source for source in self.ins[index] if source)
        kept = sorted(kept)
        # graphsurgeon drops a folded output from its producer's output list (the others shift): never kept here.
        require(not any(name in gone for i in kept for name in self.outs[i]), "a kept node loses an output")
        names = tensor_order(self.input_names, [self.ins[i] for i in kept], [self.outs[i] for i in kept],
                             self.output_names)
        initializer = [folded[name] if name in folded else self._constant_proto(name)
                       for name in names if name in self.initializers or name in gone]
        io_names = set(self.input_names) | set(self.output_names)
        value_info = [self.values.proto(name) for name in names
                      if name not in io_names and name not in gone and name not in self.initializers
                      and self.values.described(name)]
        kept_nodes = [self.nodes[i] for i in kept]
        inputs = [self.values.proto(name) for name in self.input_names]
        outputs = [self.values.proto(name) for name in self.output_names]
        # Last, once nothing can be out of scope any more: the model as given then is graphsurgeon's.
        lowered = {name: self.lowered[name] for name in [*self.exported_lowered, *names] if name in self.lowered}
        repeat_side_effects([*self.exported_nodes, *kept_nodes], lowered)
        return exported_model(self.model, [exported_node(node) for node in kept_nodes], inputs, outputs,
                              initializer, value_info)


def _check_node(node: onnx.NodeProto) -> None:
    """graphsurgeon imports and exports it (gs_export.check_node) and evaluates it as written: no attribute
    of a type its importer skips (the node it would evaluate would lack it), no tensor attribute on disk."""
    check_node(node)
    for attribute in node.attribute:
        require(attribute.type in VALUE_FIELDS, f"attribute {attribute.name!r} of {node.op_type}")
        if attribute.type == onnx.AttributeProto.TENSOR:
            require(not is_on_disk(attribute.t), "a tensor attribute on disk")


def _check_constant(node: onnx.NodeProto) -> None:
    """What fast_fold reads of a Constant node graphsurgeon lowers (`value`, a tensor, not a reference)."""
    attributes = node.attribute
    require(len(attributes) == 1, "a Constant without exactly one attribute")
    value = attributes[0]
    require(value.name == "value" and value.type == onnx.AttributeProto.TENSOR and not value.ref_attr_name
            and not is_on_disk(value.t) and value.t.data_type in GS_SIZED_TYPES, "a Constant other than value=tensor")


def _constant_output(node: onnx.NodeProto) -> str:
    require(node.domain in DEFAULT_DOMAINS, "a custom-domain Constant")
    outputs = node.output
    require(len(outputs) == 1 and outputs[0], "a Constant without exactly one output")
    return outputs[0]


def _raw_tensor(name: str, values: np.ndarray) -> onnx.TensorProto:
    return helper.make_tensor(name=name, data_type=helper.np_dtype_to_tensor_dtype(values.dtype),
                              dims=values.shape, vals=values.tobytes(), raw=True)
