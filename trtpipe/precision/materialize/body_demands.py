"""The types If/Loop/Scan bodies read outer-scope tensors in, so the enclosing graph can store
its weights that way.

Decision: a weight of the enclosing graph read inside a body is stored in the type
the body nodes reading it need (weight_types.py counts these demands like any
other consumer's), so a body reads it as it is: a Cast inside a Loop body would run
on every iteration. A body output that is an outer tensor itself demands the type
the body declares.
"""

from __future__ import annotations

from collections import defaultdict

import onnx

from trtpipe.graph.names.scopes import node_subgraphs
from trtpipe.precision.network.element_types import KEEP, RETYPABLE
from trtpipe.precision.materialize.node_types import decide_node_types


def body_demands(graph: onnx.GraphProto, node_precision: dict[str, str], types: dict[str, int],
                 opsets: dict[str, int]) -> dict[str, list[int]]:
    """Tensor of `graph` (or an enclosing scope) -> the exact types its body readers need, in order."""
    found: dict[str, list[int]] = defaultdict(list)
    for node in graph.node:
        for _, body in node_subgraphs(node):
            _collect(body, set(), node_precision, types, opsets, found)
    return found


def _collect(body: onnx.GraphProto, enclosing_local: set[str], node_precision, types, opsets, found) -> None:
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
                    found[inner.input[slot]].append(requirement.cast_to)
        for _, nested in node_subgraphs(inner):
            _collect(nested, local, node_precision, types, opsets, found)
        local.update(inner.output)
    for value in body.output:
        if value.name not in local and types.get(value.name) in RETYPABLE:
            found[value.name].append(types[value.name])
