"""Remove Casts to the type their input already has: they are no precision decision.

What the trap is. Exporters write `Cast(to=FLOAT)` on tensors that are FP32
already (a channels-last ResNet-50 export carries ~300 of them, after the
input Transpose, every Relu and Add, before every Conv). Such a Cast changes
no value and no type, but the precision stage respects every Cast it finds
(`Cast: kept as authored`), so each one pins an FP32 tensor into an otherwise
FP16 network: the plan then keeps its neighbours FP32 and writes Casts around
them (on that export: 182 kept, 285 elementwise nodes FP32, 232 Casts written;
the same graph without them needs the two Casts of its I/O).

What we change. A main-graph Cast (default domain) whose input's element type
is known and equals its `to` is removed, its readers reading its input instead
(chains of such Casts collapse to their first input). The Cast is the identity
there (`saturate` matters only for float8 targets, and the type is the same),
so every runtime computes exactly what it did before.

Where a type comes from (never a guess: a Cast whose input type is unknown stays):
- graph inputs (ONNX Runtime enforces their declared type), initializers,
  Constant nodes (their value's type), the outputs of Casts (their `to`);
- `value_info` and the declared graph outputs only when sanitize inferred
  shapes (`trust_value_info`), and only for outputs of standard ops: that
  inference just ran, so those are derived, not an author's claims that
  nothing checks (with `sanitize.infer_shapes=false` a stale entry would make
  a real conversion look like a no-op; a custom op's outputs keep the entry
  its author wrote, which no inference checked).

Decisions (each with its reason):
- A Cast that writes a graph output keeps the output's name: its (resolved)
  input is renamed to the output's name (its producer writes it directly) when
  that input is a node's output that is no graph output itself and no body
  reads; otherwise the Cast stays, listed with the reason (it is then what
  gives the graph output its name: `x -> Cast -> y` where `x` is a graph input,
  or a second graph output of the same tensor). Graph I/O names are the
  interface and never change.
- Subgraphs (If/Loop/Scan bodies) are left alone: no Cast inside a body is
  removed, and a main-graph Cast whose output a body reads by name (an
  outer-scope read) stays, listed: rewriting names across scopes is a pass of
  its own, and exporters write these Casts in the main graph.
- CastLike is left alone (its target is a second tensor, read only for its type).
- Cast nodes whose `to` is not an integer attribute (opset < 6 wrote a string) stay.
"""

from __future__ import annotations

import logging

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs

logger = logging.getLogger(__name__)

# Constant node attributes that carry a value, and the element type each gives its output.
_CONSTANT_ATTRIBUTE_TYPES = {
    "value_float": onnx.TensorProto.FLOAT, "value_floats": onnx.TensorProto.FLOAT,
    "value_int": onnx.TensorProto.INT64, "value_ints": onnx.TensorProto.INT64,
    "value_string": onnx.TensorProto.STRING, "value_strings": onnx.TensorProto.STRING,
}


def remove_noop_casts(model: onnx.ModelProto, *, trust_value_info: bool) -> dict:
    """Remove main-graph Casts to their input's own type, in place.

    Returns `{"removed": [Cast names], "kept": [{"node", "reason"}]}`: `kept` lists the
    no-op Casts that stay, each with its reason (see the module docstring).
    """
    graph = model.graph
    types = known_element_types(graph, trust_value_info=trust_value_info)
    body_reads = _names_in_bodies(graph)
    graph_outputs = {value.name for value in graph.output}
    through: dict[str, str] = {}  # a removed Cast's output -> its input
    removed: list[int] = []  # node indices, in graph order
    to_output: list[int] = []
    kept: list[dict] = []
    for index, node in enumerate(graph.node):
        if not _is_noop_cast(node, types):
            continue
        if node.output[0] in body_reads:
            kept.append({"node": _name(node, index), "reason": "a subgraph (If/Loop/Scan body) reads its output by name"})
        elif node.output[0] in graph_outputs:
            to_output.append(index)
        else:
            through[node.output[0]] = node.input[0]
            removed.append(index)

    def source(tensor: str) -> str:
        while tensor in through:
            tensor = through[tensor]
        return tensor

    renamed = _outputs_written_by_producers(graph, to_output, source, body_reads, graph_outputs, kept)
    removed = sorted(removed + [index for index in to_output if graph.node[index].output[0] in renamed.values()])
    if not removed:
        return {"removed": [], "kept": kept}
    names = [_name(graph.node[index], index) for index in removed]
    gone_outputs = {graph.node[index].output[0] for index in removed}
    for node in graph.node:
        for position, tensor in enumerate(node.input):
            if tensor in through or tensor in renamed:
                resolved = source(tensor)
                node.input[position] = renamed.get(resolved, resolved)
        for position, tensor in enumerate(node.output):
            if tensor in renamed:
                node.output[position] = renamed[tensor]
    for index in reversed(removed):
        del graph.node[index]
    _drop_value_info(graph, set(renamed) | gone_outputs)
    logger.info("removed %d no-op Cast(s) (a Cast to the type its input already has)", len(removed))
    return {"removed": names, "kept": kept}


def _name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"<unnamed Cast #{index}>"


def known_element_types(graph: onnx.GraphProto, *, trust_value_info: bool) -> dict[str, int]:
    """Tensor name -> element type, from the sources the module docstring lists (0, unknown, left out)."""
    types = {tensor.name: tensor.data_type for tensor in graph.initializer}
    derived = {tensor for node in graph.node if node.domain in DEFAULT_DOMAINS for tensor in node.output} \
        if trust_value_info else set()
    inferred = [value for value in (*graph.value_info, *graph.output) if value.name in derived]
    for value in [*graph.input, *inferred]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types.setdefault(value.name, value.type.tensor_type.elem_type)
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS or not node.output:
            continue
        if node.op_type == "Cast":
            to = _cast_target(node)
            if to:
                types[node.output[0]] = to
        elif node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.HasField("t"):
                    types[node.output[0]] = attribute.t.data_type
                elif attribute.name in _CONSTANT_ATTRIBUTE_TYPES:
                    types[node.output[0]] = _CONSTANT_ATTRIBUTE_TYPES[attribute.name]
    return types


def _is_noop_cast(node: onnx.NodeProto, types: dict[str, int]) -> bool:
    if node.op_type != "Cast" or node.domain not in DEFAULT_DOMAINS or len(node.input) != 1 or len(node.output) != 1:
        return False
    to = _cast_target(node)
    return bool(to) and bool(node.input[0]) and bool(node.output[0]) and types.get(node.input[0]) == to


def _cast_target(node: onnx.NodeProto) -> int | None:
    for attribute in node.attribute:
        if attribute.name == "to" and attribute.type == onnx.AttributeProto.INT:
            return attribute.i
    return None


def _outputs_written_by_producers(graph, casts: list[int], source, body_reads, graph_outputs, kept) -> dict[str, str]:
    """For no-op Casts writing a graph output: {their input's source: the output's name}, where renaming is safe.

    The rest go into `kept` with the reason (module docstring).
    """
    produced = {tensor for node in graph.node for tensor in node.output if tensor}
    renamed: dict[str, str] = {}
    for index in casts:
        node = graph.node[index]
        tensor = source(node.input[0])
        reason = None
        if tensor not in produced:
            reason = "it writes a graph output from a graph input or a weight: it is what gives the output its name"
        elif tensor in graph_outputs:
            reason = "it writes a graph output from a tensor that is a graph output too: both names are the interface"
        elif tensor in renamed:
            reason = (f"it writes a graph output from the tensor that now writes graph output {renamed[tensor]!r}: "
                      "both names are the interface")
        elif tensor in body_reads:
            reason = "it writes a graph output and a subgraph (If/Loop/Scan body) reads its input by name"
        if reason is None:
            renamed[tensor] = node.output[0]
        else:
            kept.append({"node": _name(node, index), "reason": reason})
    return renamed


def _names_in_bodies(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name that a subgraph, at any depth, reads or lists as an output (outer-scope reads included)."""
    names: set[str] = set()
    for body in list(all_graphs(graph))[1:]:
        names.update(tensor for node in body.node for tensor in node.input if tensor)
        names.update(value.name for value in body.output)
    return names


def _drop_value_info(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the value_info of tensors that no longer exist under that name (the graph outputs keep theirs)."""
    keep = [value for value in graph.value_info if value.name not in names]
    if len(keep) != len(graph.value_info):
        copies = [onnx.ValueInfoProto.FromString(value.SerializeToString()) for value in keep]
        del graph.value_info[:]
        graph.value_info.extend(copies)
