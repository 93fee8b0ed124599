"""Make a decided precision plan true in the ONNX graph (DESIGN.md, "Materialisation").

`materialize(model, node_precision)` returns a new model whose tensor types
are the plan: under TensorRT's strongly typed networks the types *are* the
layer precisions. The steps, each in its own module:

1. node_types.py: from the op schema, the type every float input of every
   node needs and the type every float output is produced in;
2. weight_types.py / weight_copies.py: weights are stored in the type their
   consumers read, clipped and reported where they do not fit;
3. casts.py: the fewest Casts where a produced type and a needed type differ;
4. the graph is reassembled, stale `value_info` dropped and shapes re-inferred.

Decisions:
- The input model is never modified; all edits happen on a copy.
- The plan must name every node, bodies included (unnamed nodes are named first,
  as TensorRT's parser names them, see `name_unnamed_nodes`; body nodes by their
  qualified name, graph/names/scopes.py) and nothing else: a missing or
  unknown name is an error, because a precision silently not applied is the
  failure this product exists to prevent.
- bf16 needs opset 13 or later (the first Cast and most ops that accept it).
- Types of the input model come from ONNX shape inference on the copy with its
  `value_info` removed, so a stale entry cannot mislead the materialiser.
"""

from __future__ import annotations

import onnx

from trtpipe.errors import UserError
from trtpipe.graph.names.scopes import node_subgraphs, rename_sibling_collisions, scoped_nodes
from trtpipe.onnxmodel.subgraphs import all_graphs, has_body
from trtpipe.onnxmodel.value_info import infer_shapes, inferred_copy
from trtpipe.precision.materialize.cast_steps import cast_steps
from trtpipe.precision.materialize.casts import BoundaryCasts, available_by_type
from trtpipe.precision.network.element_types import RETYPABLE, VALID_PRECISIONS, short_name
from trtpipe.precision.network.graph_index import (
    UniqueNames,
    index_graph,
    is_topologically_sorted,
    name_unnamed_nodes,
    outer_names_read,
    topologically_sorted,
)
from trtpipe.precision.materialize.body_demands import body_demands
from trtpipe.precision.materialize.if_outputs import retype_if_outputs
from trtpipe.precision.materialize.node_types import decide_node_types
from trtpipe.precision.materialize.type_rules import opset_versions
from trtpipe.precision.materialize.weight_copies import StoredWeights, store_weights
from trtpipe.precision.materialize.weight_types import decide_weight_types

__all__ = ["materialize", "name_unnamed_nodes"]

BF16_MIN_OPSET = 13
_SHOWN_NAMES = 5


def materialize(
    model: onnx.ModelProto, node_precision: dict[str, str], *, keep_io_types: bool = True
) -> tuple[onnx.ModelProto, dict]:
    """The model with `node_precision` applied, and a JSON-serialisable report of every decision.

    `node_precision` maps every node name to "fp32", "fp16", "bf16" or "keep"
    (leave the node exactly as authored). With `keep_io_types`, graph inputs
    and outputs keep their types and Casts are added at the boundary; without
    it, float inputs take the type their consumers agree on and float outputs
    the type they are produced in.
    """
    working = onnx.ModelProto()
    working.CopyFrom(model)
    graph = working.graph
    bodies = _has_bodies(graph)  # without bodies, the next two are no-ops that walk every node
    if bodies:
        rename_sibling_collisions(graph)
    named = name_unnamed_nodes(working) + (_name_body_nodes(graph) if bodies else [])
    for scope in all_graphs(graph):
        del scope.value_info[:]
    opsets = opset_versions(working)
    _check_plan(graph, node_precision, opsets)
    types = authored_element_types(working)
    in_use = {name for scope in all_graphs(graph) for name in _names_in(scope)}
    report = _empty_report()
    _materialize_graph(graph, node_precision, types, opsets, UniqueNames(in_use), report,
                       keep_io_types=keep_io_types)
    report["casts_added"] = {"count": len(report["casts_added"]), "casts": report["casts_added"]}
    for entry in report["if_outputs_retyped"]:
        entry["type"] = short_name(entry["type"])
    report["nodes_named"] = named
    report["casts"] = cast_steps(working)  # once / per Loop/Scan step (cast_steps.py)
    return infer_shapes(working), report


def _empty_report() -> dict:
    lists = ("casts_added", "initializers_converted", "constants_converted", "saturated", "kept_fp32_inputs",
             "casts_reused", "casts_looked_through", "weight_chain_nodes", "precision_not_applied",
             "untyped_tensors", "if_outputs_retyped")
    return {key: [] for key in lists}


def _materialize_graph(graph, node_precision, types, opsets, names: UniqueNames, report: dict, *,
                       keep_io_types: bool, outer: dict[str, dict[int, str]] | None = None) -> None:
    """Apply the plan to `graph`, then to its bodies (`outer`: what the enclosing scopes hold, by type).

    Decisions (bodies):
    - A body keeps the types of its inputs and outputs as authored (`keep_io_types`
      within it): If branches must agree with each other and with the If's declared
      outputs, and a Loop/Scan carried state keeps one type across iterations; a body
      output computed in another precision is cast back inside the body, except
      that an If whose branches agree outputs that type itself (if_outputs.py).
    - A body node reading an outer-scope tensor reads it in any type the enclosing
      scope already holds it in (e.g. the FP16 that scope computes). An outer-scope
      weight is stored in the types its readers need, body readers included
      (body_demands.py). A tensor read inside a Loop/Scan body in another type is
      loop-invariant: the graph that holds it converts it once, before the loop, and
      the body reads the converted tensor (casts.py `serve_loop_reads`), so no Cast
      of it runs on every iteration. Only a read from If branches alone is cast at the
      start of the branch (it runs once, and only when that branch is taken).
    """
    is_main = outer is None
    if not is_topologically_sorted(list(graph.node)):
        _replace_nodes(graph, topologically_sorted(list(graph.node)))
    index = index_graph(graph)
    node_names = [node.name for node in graph.node]
    precisions = [node_precision[name] for name in node_names]
    by_key: dict = {}  # node types decided once per distinct key within this graph (node_types.py)
    decided = [
        decide_node_types(node, precision, types, opsets, by_key) for node, precision in zip(graph.node, precisions)
    ]
    _retarget_casts(graph, decided)
    report["if_outputs_retyped"] += retype_if_outputs(graph, decided, node_precision, types, opsets)
    body_needs = body_demands(graph, node_precision, types, opsets) if index.implicit else None
    weights = decide_weight_types(graph, index, decided, precisions, types, keep_io_types, names,
                                  body_needs.exact if body_needs else None)
    stored = store_weights(graph, index, weights, names)
    available = available_by_type(graph, decided, weights.available)
    if not is_main:  # outer-scope tensors read here: available as the enclosing scope holds them
        for name in outer_names_read(graph):
            if name in outer:
                available.setdefault(name, dict(outer[name]))
    boundary = BoundaryCasts(graph, index, decided, available, types, names)
    placed = boundary.place(keep_io_types)
    if body_needs is not None:
        boundary.serve_loop_reads(body_needs.per_step)
    if not is_main:
        boundary.outputs_in_declared_types()

    input_types = {
        name: next(iter(weights.available[name])) for name in index.graph_inputs if name in weights.available
    }
    _reassemble(graph, stored, placed.after, input_types, placed.output_types)
    report["casts_added"] += placed.casts_added
    report["initializers_converted"] += stored.initializers_converted
    report["constants_converted"] += stored.constants_converted
    report["saturated"] += stored.saturated
    report["kept_fp32_inputs"] += placed.kept_fp32_inputs
    report["casts_reused"] += placed.casts_reused
    report["casts_looked_through"] += placed.casts_looked_through
    # Data-movement nodes on weights: typed like the node that uses the weight (weight_types.py).
    report["weight_chain_nodes"] += [
        {"node": node_names[position], "type": short_name(decided[position].outputs[0])}
        for position in weights.chain_nodes
    ]
    report["precision_not_applied"] += [
        {"node": node_names[position], "reason": reason}
        for position, node_types in enumerate(decided)
        for reason in node_types.not_applied
    ]
    # Node outputs shape inference could not type (custom ops): left exactly as they are.
    report["untyped_tensors"] += [name for name in index.producer if name not in types]
    if is_main:
        report["graph_io"] = {
            "keep_io_types": keep_io_types,
            "inputs": {name: short_name(t) for name, t in input_types.items()},
            "outputs": {name: short_name(t) for name, t in placed.output_types.items()},
        }
    visible = {**(outer or {}), **available}
    has_bodies = False
    for node in graph.node:
        for _, body in node_subgraphs(node):
            has_bodies = True
            _materialize_graph(body, node_precision, types, opsets, names, report, keep_io_types=True, outer=visible)
    # A body may now read an author's Cast this graph placed after its control-flow node.
    if has_bodies and not is_topologically_sorted(list(graph.node)):
        _replace_nodes(graph, topologically_sorted(list(graph.node)))


def _retarget_casts(graph: onnx.GraphProto, decided: list) -> None:
    """Write the `to` of every Cast whose decided output type differs from it (a Cast planned fp32
    that cast to FP16: node_types.py `_promoted_cast`)."""
    for node, node_types in zip(graph.node, decided):
        if node.op_type != "Cast" or node_types.target is None or not node_types.outputs:
            continue
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i != node_types.outputs[0]:
                attribute.i = node_types.outputs[0]


def _has_bodies(graph: onnx.GraphProto) -> bool:
    """Whether a node holds a body (an attribute of graph type, as `node_subgraphs` reads them)."""
    return any(has_body(node) for node in graph.node)




def _name_body_nodes(graph: onnx.GraphProto) -> list[str]:
    """Write every body node's qualified name (graph/names/scopes.py); returns the names that changed."""
    named = []
    for scoped in scoped_nodes(graph):
        if scoped.parent is not None and scoped.node.name != scoped.name:
            scoped.node.name = scoped.name
            named.append(scoped.name)
    return named


def _names_in(graph: onnx.GraphProto):
    yield from (value.name for value in [*graph.input, *graph.output])
    yield from (tensor.name for tensor in graph.initializer)
    for node in graph.node:
        yield node.name
        yield from (name for name in node.output if name)


def authored_element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every typed tensor, bodies included, as the model is written.

    One flat mapping: tensor names are unique across scopes (`rename_sibling_collisions`)."""
    inferred = inferred_copy(model)
    types = {}
    for graph in all_graphs(inferred.graph):
        for value in [*graph.input, *graph.value_info, *graph.output]:
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types[value.name] = value.type.tensor_type.elem_type
    for graph in all_graphs(model.graph):
        for tensor in graph.initializer:
            types[tensor.name] = tensor.data_type
    return types


def _check_plan(graph: onnx.GraphProto, node_precision: dict[str, str], opsets: dict[str, int]) -> None:
    every_node = [node for scope in all_graphs(graph) for node in scope.node]
    node_names = {node.name for node in every_node}
    missing = [node.name for node in every_node if node.name not in node_precision]
    if missing:
        raise UserError(
            f"the precision plan has no precision for {len(missing)} node(s): {_some(missing)}",
            "give every node fp32, fp16, bf16 or keep (name unnamed nodes with name_unnamed_nodes first)",
        )
    unknown = [name for name in node_precision if name not in node_names]
    if unknown:
        raise UserError(
            f"the precision plan names {len(unknown)} node(s) the model does not have: {_some(unknown)}",
            "build the plan from this model",
        )
    invalid = sorted({value for value in node_precision.values() if value not in VALID_PRECISIONS})
    if invalid:
        raise UserError(
            f"unknown precision(s) {', '.join(map(repr, invalid))} in the precision plan",
            f"use one of {', '.join(VALID_PRECISIONS)}",
        )
    if "bf16" in node_precision.values() and opsets.get("", 0) < BF16_MIN_OPSET:
        raise UserError(
            f"bf16 needs opset {BF16_MIN_OPSET} or later, the model imports opset {opsets.get('', 0)}",
            "run the upgrade_opset stage first, or use fp16",
        )


def _some(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_SHOWN_NAMES])
    return shown + (f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else "")


def _reassemble(
    graph: onnx.GraphProto,
    stored: StoredWeights,
    casts_after: dict[int, list[onnx.NodeProto]],
    input_types: dict[str, int],
    output_types: dict[str, int],
) -> None:
    """New nodes after their producers, converted initializers, graph input/output types."""
    nodes = list(casts_after.get(-1, ()))
    for position, node in enumerate(graph.node):
        nodes.append(node)
        nodes.extend(stored.constants_after.get(position, ()))
        nodes.extend(casts_after.get(position, ()))
    # Reusing an author's Cast can make a consumer read a Cast placed after it.
    if not is_topologically_sorted(nodes):
        nodes = topologically_sorted(nodes)
    _replace_nodes(graph, nodes)
    if stored.initializers is not None:
        del graph.initializer[:]
        graph.initializer.extend(stored.initializers)
    for value in graph.input:
        if value.name in input_types and value.type.tensor_type.elem_type in RETYPABLE:
            value.type.tensor_type.elem_type = input_types[value.name]
    for value in graph.output:
        if value.name in output_types:
            value.type.tensor_type.elem_type = output_types[value.name]


def _replace_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    del graph.node[:]
    graph.node.extend(nodes)
