"""Values computed inside If/Loop/Scan bodies, made visible to an FP32 reference run.

ONNX Runtime returns graph outputs only, and only main-graph tensors can be
made graph outputs. To measure what a body computes (the range rule, the
shapes of the FLOP share), a *copy* of the model carries every float tensor a
body produces out of its control-flow node:

- Loop and Scan: as an extra scan output (ONNX stacks the per-iteration
  values along a new first axis, so the value seen outside holds every
  iteration; Scan's `scan_output_axes`/`scan_output_directions` get the
  defaults for the new outputs);
- If: as an extra output of both branches; the branch that does not compute
  the tensor outputs an empty tensor of the same type (`[0]`), so the If's
  output is the value when that branch ran and empty when it did not;
- nested bodies: inner values are carried outward level by level.

Decisions:
- Every carried value passes through an `Identity` named after it, so a body
  output never lists a tensor twice and the body's own outputs are untouched;
  the model the user gets is never changed.
- A body tensor without an inferred float type is not carried (its range stays
  unknown, as for any untyped tensor).
- If the copy cannot run (per-iteration shapes a scan output cannot stack),
  the caller tries again without the branches of Ifs inside Loop/Scan bodies
  (an If taking both branches over the iterations is the common cause), then
  with the main graph only, and says so; the ranges left out are unknown and
  their nodes keep `precision.default` (see auto_range.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

from trtpipe.graph.names.parser_names import unique_name
from trtpipe.graph.names.scopes import node_subgraphs
from trtpipe.onnxmodel.subgraphs import all_graphs

CARRIED_SUFFIX = "__trtpipe_body"
_FLOAT = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


@dataclass(frozen=True)
class Carried:
    tensor: str  # the body tensor's own name
    levels: int  # how many Loop/Scan stackings lead the value seen outside


def carrying_body_values(model: onnx.ModelProto, types: dict[str, int], *, ifs_in_repeats: bool = True
                         ) -> tuple[onnx.ModelProto, dict[str, Carried]]:
    """A copy of `model` whose main graph outputs each body tensor's values; main-graph name -> Carried.

    `ifs_in_repeats=False` leaves out the branches of Ifs inside a Loop/Scan body: when
    an If takes both branches over the iterations, each branch's carried value is empty
    in some iterations and full in others, which a scan output cannot stack."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    taken = {name for graph in all_graphs(copy.graph) for name in _names(graph)}
    carried = _carry_out_of_bodies(copy.graph, types, taken, skip_ifs=not ifs_in_repeats, in_repeat=False)
    for name in carried:
        copy.graph.output.append(onnx.ValueInfoProto(name=name))
    return copy, carried


def _names(graph: onnx.GraphProto):
    yield from (value.name for value in graph.input)
    yield from (tensor.name for tensor in graph.initializer)
    yield from (name for node in graph.node for name in node.output if name)
    yield from (node.name for node in graph.node)


def _carry_out_of_bodies(graph: onnx.GraphProto, types: dict[str, int], taken: set[str], *, skip_ifs: bool,
                         in_repeat: bool) -> dict[str, Carried]:
    """Name in `graph` -> the body tensor it carries, for every control-flow node of `graph`."""
    found: dict[str, Carried] = {}
    for node in list(graph.node):
        bodies = list(node_subgraphs(node))
        if node.op_type not in ("If", "Loop", "Scan") or not bodies or (skip_ifs and in_repeat and node.op_type == "If"):
            continue
        repeat = in_repeat or node.op_type in ("Loop", "Scan")
        per_body = [_values_of(body, types, taken, skip_ifs, repeat) for _, body in bodies]
        if node.op_type == "If" and len(per_body) == 2:
            everything = per_body[0] + per_body[1]
            for position, (_, body) in enumerate(bodies):
                own = {inner for inner, _ in per_body[position]}
                for inner, value in everything:
                    _add_body_output(body, inner if inner in own else None, value.tensor, types, taken)
            stacking = 0
        elif node.op_type in ("Loop", "Scan") and len(per_body) == 1:
            everything = per_body[0]
            for inner, value in everything:
                _add_body_output(bodies[0][1], inner, value.tensor, types, taken)
            _extend_scan_attributes(node, len(everything))
            stacking = 1
        else:
            continue
        for _, value in everything:
            outer = unique_name(f"{value.tensor}{CARRIED_SUFFIX}", taken)
            taken.add(outer)
            node.output.append(outer)
            found[outer] = Carried(value.tensor, value.levels + stacking)
    return found


def _values_of(body: onnx.GraphProto, types: dict[str, int], taken: set[str], skip_ifs: bool,
               in_repeat: bool) -> list[tuple[str, Carried]]:
    """(name in `body`, Carried) for the body's own float node outputs and what its nested bodies carry."""
    own = [
        (name, Carried(name, 0))
        for node in body.node
        for name in node.output
        if name and types.get(name) in _FLOAT
    ]
    nested = _carry_out_of_bodies(body, types, taken, skip_ifs=skip_ifs, in_repeat=in_repeat)
    return own + list(nested.items())


def _add_body_output(body: onnx.GraphProto, inner: str | None, tensor: str, types, taken: set[str]) -> None:
    """Output `inner` (through an Identity), or an empty tensor of `tensor`'s type when None."""
    elem_type = types[tensor]
    name = unique_name(f"{tensor}{CARRIED_SUFFIX}", taken)
    taken.add(name)
    if inner is None:
        empty = helper.make_tensor(f"{name}/empty", elem_type, [0], [])
        body.node.append(helper.make_node("Constant", [], [name], name=name, value=empty))
    else:
        body.node.append(helper.make_node("Identity", [inner], [name], name=name))
    body.output.append(helper.make_tensor_value_info(name, elem_type, None))


def _extend_scan_attributes(node: onnx.NodeProto, added: int) -> None:
    for attribute in node.attribute:
        if attribute.name in ("scan_output_axes", "scan_output_directions"):
            attribute.ints.extend([0] * added)
