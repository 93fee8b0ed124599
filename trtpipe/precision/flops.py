"""FLOPs of the ops that dominate run time (MatMul, Gemm, Conv), from inferred shapes.

Used for one figure users ask first: the share of the heavy compute that runs in
low precision. Unknown dimensions count as 1 (the figure is a share, and dynamic
dims scale numerator and denominator alike).
"""

from __future__ import annotations

from math import prod

from trtpipe.precision.network import Network


def node_flops(net: Network, name: str) -> int:
    node = net.nodes[name]
    out = _shape(net, node.output[0]) if node.output else None
    if out is None:
        return 0
    if node.op_type == "MatMul":
        a = _shape(net, node.input[0])
        return 2 * prod(out) * (a[-1] if a else 1)
    if node.op_type == "Gemm":
        a = _shape(net, node.input[0])
        trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
        k = (a[0] if trans_a else a[-1]) if a else 1
        return 2 * prod(out) * k
    if node.op_type in ("Conv", "ConvTranspose"):
        w = _shape(net, node.input[1])
        return 2 * prod(out) * (prod(w[1:]) if w else 1)
    return 0


def _shape(net: Network, tensor: str) -> list[int] | None:
    shape = net.tensor_shapes.get(tensor)
    return None if shape is None else [d or 1 for d in shape]
