"""LayerNorm fusion on the ModelProto: the same matches, rewrite and written model as the
onnx-graphsurgeon round trip in `layernorm_fusion`, without the round trip.

`layernorm_fusion` matches the rule's patterns on `matchable_graph(working)` (a
`proto_view.ProtoGraph` of the shape-inferred working copy) at the nodes `candidates`
names, checks them with the same `layernorm_rule.check`, and writes the result with
`rewritten_model`: each fused node as graphsurgeon exports it, the model as
`gs_export.export_like_graphsurgeon` (cleanup + toposort order, initializer and
value_info order, attributes as graphsurgeon re-makes them).

Decisions:
- Same result, byte for byte: bench/same_output/same_output.py (--stage upgrade_opset) compares the stage output with
  main's on the built-in models, the bench encoders, the wild corpus, LayerNorm form
  variants and mutated/fuzzed graphs; tests/graph/test_layernorm_proto.py on a few.
- `gs_export.OutOfScope` (If/Loop/Scan bodies, local functions, several producers of a
  tensor, a new initializer name already taken, ...) leaves the working copy untouched
  (this path only reads it); the caller then takes the round trip from the same copy.
- A pattern is tried only at nodes whose inputs are produced by the ops the pattern
  names two levels up (`_could_match`): a necessary condition of `pattern.match`, so
  the matches found are the same, at a fraction of the calls (the encoder's ~3,000
  nodes meet 25 patterns).
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.graph.onnx_gs.gs_export import check_scope, export_like_graphsurgeon
from trtpipe.graph.layernorm.layernorm_rule import FUSED_OP, fused_parts
from trtpipe.graph.layernorm.pattern import COMMUTATIVE_OPS, Match, Pattern, PatternOp
from trtpipe.graph.onnx_gs.proto_view import ProtoGraph

PREFILTER_DEPTH = 2


def matchable_graph(working: onnx.ModelProto) -> ProtoGraph:
    """The view the matcher reads; raises `OutOfScope` for a model the round trip must handle."""
    check_scope(working)
    return ProtoGraph(working)


def candidates(graph: ProtoGraph):
    """For a pattern, the nodes (in graph order) where `pattern.match` may succeed.

    Nodes of the root's op type are grouped once by what produces their inputs (the
    op type of each input's single producer); a pattern looks only at the groups
    whose producers fit its root's inputs, then walks `PREFILTER_DEPTH` levels."""
    groups: dict[str, dict[tuple, list[int]]] = {}

    def grouped(op_type: str) -> dict[tuple, list[int]]:
        if op_type not in groups:
            by_key: dict[tuple, list[int]] = {}
            for index in graph.by_op.get(op_type, ()):
                key = (graph.nodes[index].domain in DEFAULT_DOMAINS,
                       tuple(_producer_op(graph, name) for name in graph.node_inputs[index]))
                by_key.setdefault(key, []).append(index)
            groups[op_type] = by_key
        return groups[op_type]

    walked: dict[tuple, bool] = {}  # (the root's structure, node) -> _could_match; patterns share structures

    def could_match(root: PatternOp, signature: tuple, index: int) -> bool:
        key = (signature, index)
        if key not in walked:
            walked[key] = _could_match(graph, root, index, PREFILTER_DEPTH)
        return walked[key]

    def roots(pattern: Pattern):
        root = pattern.root
        signature = _signature(root, PREFILTER_DEPTH)
        picked = sorted(index for op_type in root.op_types
                        for (default_domain, producer_ops), indices in grouped(op_type).items()
                        if default_domain and _fits(root, producer_ops) for index in indices)
        return [graph.node(index) for index in picked if could_match(root, signature, index)]
    return roots


def _signature(pattern_op: PatternOp, depth: int) -> tuple:
    """What `_could_match` reads of a pattern op: op types and arities `depth` levels up."""
    return (pattern_op.op_types, len(pattern_op.inputs), depth and tuple(
        _signature(part, depth - 1) if isinstance(part, PatternOp) else None for part in pattern_op.inputs))


def _producer_op(graph: ProtoGraph, name: str) -> str | None:
    """The op type of `name`'s single producer as `pattern.single_producer` sees it, else None."""
    producers = graph.producers.get(name, ()) if name else ()
    if len(producers) != 1 or name in graph.initializers:
        return None
    node = graph.nodes[producers[0]]
    return node.op_type if node.output[0] == name and node.domain in DEFAULT_DOMAINS else None


def _fits(pattern_op: PatternOp, producer_ops: tuple) -> bool:
    arity = len(pattern_op.inputs)
    if len(producer_ops) < arity:
        return False
    orders = [producer_ops[:arity]]
    if pattern_op.op_type in COMMUTATIVE_OPS and arity == 2:
        orders.append(producer_ops[1::-1])
    return any(all(not isinstance(part, PatternOp) or op in part.op_types for part, op in zip(pattern_op.inputs, ops))
               for ops in orders)


def rewritten_model(graph: ProtoGraph, accepted: list[Match], names: list[str]) -> onnx.ModelProto:
    """The model graphsurgeon would write after replacing each accepted match by its fused node `names[i]`."""
    roots = {found.root.index for found in accepted}
    nodes = [node for index, node in enumerate(graph.nodes) if index not in roots]  # disconnected: dead
    new_initializers: dict[str, onnx.TensorProto] = {}
    for found, name in zip(accepted, names):
        x, scale, bias, attrs = fused_parts(found, name)
        inputs = [x.name]
        for part in (scale, bias):
            if isinstance(part, tuple):
                new_initializers[part[0]] = OnnxExporter.export_tensor_proto(gs.Constant(*part))
                inputs.append(part[0])
            else:
                inputs.append(part.name)
        fused = onnx.helper.make_node(FUSED_OP, inputs=inputs, outputs=[found.root.outputs[0].name], name=name)
        fused.attribute.extend(_attribute(key, value) for key, value in attrs.items())
        nodes.append(fused)
    return export_like_graphsurgeon(graph.model, nodes, new_initializers)


def _attribute(name: str, value: int | float) -> onnx.AttributeProto:
    """`onnx.helper.make_attribute` of an int or a float (the same fields, without its ABC checks)."""
    if isinstance(value, int):
        return onnx.AttributeProto(name=name, i=value, type=onnx.AttributeProto.INT)
    return onnx.AttributeProto(name=name, f=value, type=onnx.AttributeProto.FLOAT)


def _could_match(graph: ProtoGraph, pattern_op: PatternOp, index: int, depth: int) -> bool:
    """Op types (and arity) along the pattern `depth` levels up from node `index`."""
    node = graph.nodes[index]
    if node.op_type not in pattern_op.op_types or node.domain not in DEFAULT_DOMAINS:
        return False
    inputs = graph.node_inputs[index]
    arity = len(pattern_op.inputs)
    if len(inputs) < arity:
        return False
    if depth == 0:
        return True
    orders = [inputs[:arity]]
    if pattern_op.op_type in COMMUTATIVE_OPS and arity == 2:
        orders.append(inputs[1::-1])
    for names in orders:
        if all(not isinstance(part, PatternOp) or _producer_could_match(graph, part, name, depth - 1)
               for part, name in zip(pattern_op.inputs, names)):
            return True
    return False


def _producer_could_match(graph: ProtoGraph, pattern_op: PatternOp, name: str, depth: int) -> bool:
    producers = graph.producers.get(name, ()) if name else ()
    if len(producers) != 1 or name in graph.initializers or graph.nodes[producers[0]].output[0] != name:
        return False  # pattern.single_producer would find none
    return _could_match(graph, pattern_op, producers[0], depth)
