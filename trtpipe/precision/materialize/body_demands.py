"""The types If/Loop/Scan bodies read outer-scope tensors in, so the enclosing graph can store
its weights that way and convert its loop invariants once.

Decisions:
- A weight of the enclosing graph read inside a body is stored in the type the body
  nodes reading it need (weight_types.py counts these demands like any other
  consumer's), so a body reads it as it is: a Cast inside a Loop body would run on
  every iteration. A body output that is an outer tensor itself demands the type the
  body declares.
- A read from inside a Loop/Scan body (at any depth, an If inside the Loop included)
  is also listed under `per_step`: the value is loop-invariant, so the enclosing graph
  that holds it converts it once, before the loop, and the body reads the converted
  tensor from outer scope (casts.py `BoundaryCasts.serve_loop_reads`). A read only If
  branches make is left to the branch: a Cast there runs once per If anyway, and only
  when that branch is taken. A body output that is an outer tensor itself stays cast at
  the end of the body (casts.py `outputs_in_declared_types`): a body output must be a
  name the body holds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from trtpipe.graph.names.scopes import node_subgraphs
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import KEEP, RETYPABLE
from trtpipe.precision.materialize.node_types import decide_node_types

LOOPS = frozenset({"Loop", "Scan"})


@dataclass
class BodyDemands:
    # tensor -> the exact types its body readers need, in order (weights are stored so).
    exact: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # tensor -> (type, reading body node) for readers inside a Loop/Scan body: converted once outside.
    per_step: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))


def body_demands(graph: onnx.GraphProto, node_precision: dict[str, str], types: dict[str, int],
                 opsets: dict[str, int]) -> BodyDemands:
    """What the bodies of `graph`'s nodes need of tensors of `graph` (or an enclosing scope)."""
    found = BodyDemands()
    for node in graph.node:
        for _, body in node_subgraphs(node):
            _collect(body, set(), _is_loop(node), node_precision, types, opsets, found)
    return found


def _is_loop(node: onnx.NodeProto) -> bool:
    return node.op_type in LOOPS and node.domain in DEFAULT_DOMAINS


def _collect(body: onnx.GraphProto, enclosing_local: set[str], in_loop: bool, node_precision, types, opsets,
             found: BodyDemands) -> None:
    local = set(enclosing_local)
    local.update(value.name for value in body.input)
    local.update(tensor.name for tensor in body.initializer)
    for inner in body.node:
        outer_slots = [slot for slot, name in enumerate(inner.input) if name and name not in local]
        if outer_slots:
            decided = decide_node_types(inner, node_precision.get(inner.name, KEEP), types, opsets)
            for slot in outer_slots:
                requirement = decided.inputs[slot]
                if requirement is not None and requirement.is_exact:
                    found.exact[inner.input[slot]].append(requirement.cast_to)
                    if in_loop:
                        found.per_step[inner.input[slot]].append((requirement.cast_to, inner.name))
        for _, nested in node_subgraphs(inner):
            _collect(nested, local, in_loop or _is_loop(inner), node_precision, types, opsets, found)
        local.update(inner.output)
    for value in body.output:
        if value.name not in local and types.get(value.name) in RETYPABLE:
            found.exact[value.name].append(types[value.name])
