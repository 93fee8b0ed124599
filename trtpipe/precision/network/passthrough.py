"""Ops that move data without computing: weights reached through them belong to
the node that finally uses them (an FP32 consumer keeps bit-exact FP32 weights)."""

from __future__ import annotations

from trtpipe.precision.network.network import Network

PASSTHROUGH_OPS = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Cast"}


def real_consumers(net: Network, tensor: str) -> list[str]:
    """Consumers of `tensor`, looking through passthrough ops (iterative, linear)."""
    return passthrough_walk(net, tensor)[1]


def passthrough_views(net: Network, tensor: str) -> set[str]:
    """`tensor` and every tensor that holds its values moved by passthrough ops."""
    return passthrough_walk(net, tensor)[0]


def passthrough_walk(net: Network, tensor: str) -> tuple[set[str], list[str]]:
    """(the views of `tensor` through passthrough ops, the nodes that finally use them)."""
    found: list[str] = []
    stack, seen = [tensor], {tensor}
    while stack:
        current = stack.pop()
        for consumer in net.consumers.get(current, []):
            node = net.nodes[consumer]
            if node.op_type in PASSTHROUGH_OPS and node.input and node.input[0] == current:
                for out in node.output:
                    if out and out not in seen:
                        seen.add(out)
                        stack.append(out)
            else:
                found.append(consumer)
    return seen, list(dict.fromkeys(found))
