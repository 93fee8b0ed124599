"""Respect precision an author already chose (models that mix FP16 and FP32).

When the source model already computes some nodes in FP16/BF16, its author tuned
precision by hand: those nodes, and the FP32 islands the author opened with an
explicit upcast Cast (FP16 → FP32) and closed with a downcast, are left exactly as
authored (`keep`). Only the remaining FP32 regions are converted by rule.

Decision: an island counts as authored only when it is closed — every path out of
it ends at a Cast back to low precision. An FP32 region after the author's last
upcast that runs to the graph outputs is the untuned remainder (the author left
FP16 there, not deliberately entered FP32), so it is converted like any other.
"""

from __future__ import annotations

import onnx

from trtpipe.precision.network.network import Network

_LOW = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def authored_decisions(net: Network) -> dict[str, str]:
    """node -> reason, for nodes that keep their authored precision."""
    if not any(net.tensor_types.get(t) in _LOW for t in net.tensor_types):
        return {}
    kept: dict[str, str] = {}
    for name in net.names:
        if any(net.tensor_types.get(t) in _LOW for t in net.float_outputs(name)):
            kept[name] = "authored: computes in low precision in the source model"
    for name in net.names:
        node = net.nodes[name]
        if node.op_type == "Cast" and net.tensor_types.get(node.input[0]) in _LOW and net.float_outputs(name):
            island = _island_after(net, node.output[0], kept)
            if island is not None:
                for member in island:
                    kept[member] = f"authored: FP32 island between Cast {name} and a Cast back to low precision"
    return kept


def _island_after(net: Network, tensor: str, kept: dict[str, str]) -> list[str] | None:
    """FP32 nodes downstream of an author's upcast, up to the next Casts; None when not closed."""
    graph_outputs = {value.name for value in net.model.graph.output}
    island: list[str] = []
    stack, seen = [tensor], {tensor}
    while stack:
        current = stack.pop()
        if current in graph_outputs:
            return None
        for consumer in net.consumers.get(current, []):
            if consumer in kept or consumer in island:
                continue
            if net.op_type(consumer) == "Cast":
                if net.tensor_types.get(net.nodes[consumer].output[0]) not in _LOW:
                    return None  # leaves the island without returning to low precision
                continue
            island.append(consumer)
            for out in net.float_outputs(consumer):
                if out not in seen:
                    seen.add(out)
                    stack.append(out)
    return island
