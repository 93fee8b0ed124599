"""FLOPs of the ops that dominate run time (MatMul, Gemm, Conv), from the shapes the sample data gives.

Used for one figure users ask first: the share of the heavy compute that runs in
low precision. Shapes come from flop_shapes.py (the reference run, else shape
inference with the sample feeds' shapes, else the model's static shapes); a
dimension still unknown counts as 1 and `has_unknown_dims` says so. A node inside
a Loop/Scan body counts once per iteration (`times_run`).
"""

from __future__ import annotations

from math import prod

from trtpipe.precision.network.flop_shapes import known_shape, times_run
from trtpipe.precision.network.network import Network

HEAVY_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "RNN")
RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def node_flops(net: Network, name: str) -> int:
    node = net.nodes[name]
    if node.op_type not in HEAVY_OPS or not node.output:
        return 0
    if node.op_type in RECURRENT_OPS:
        return _recurrent_flops(net, node) * (times_run(net, name) if name in net.parent else 1)
    out = _shape(net, node.output[0])
    if out is None:
        return 0
    if node.op_type == "MatMul":
        a = _shape(net, node.input[0])
        once = 2 * prod(out) * (a[-1] if a else 1)
    elif node.op_type == "Gemm":
        a = _shape(net, node.input[0])
        trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
        k = (a[0] if trans_a else a[-1]) if a else 1
        once = 2 * prod(out) * k
    else:
        w = _shape(net, node.input[1])
        once = 2 * prod(out) * (prod(w[1:]) if w else 1)
    return once * times_run(net, name) if name in net.parent else once


def _recurrent_flops(net: Network, node) -> int:
    """LSTM/GRU/RNN: per step and direction, the gates' input and recurrent projections:
    2 x (gates x hidden) x (input + hidden) MACs for every (sequence step, batch row).
    X is [seq, batch, input] (or [batch, seq, input]); W is [directions, gates x hidden, input]."""
    x, w, r = (_shape(net, node.input[i]) if len(node.input) > i and node.input[i] else None for i in range(3))
    if not x or not w or not r or len(x) < 2 or len(w) < 3 or len(r) < 3:
        return 0
    return 2 * x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])


def has_unknown_dims(net: Network, name: str) -> bool:
    """A heavy node whose FLOPs were counted with an unknown dimension taken as 1."""
    node = net.nodes[name]
    if node.op_type not in HEAVY_OPS:
        return False
    tensors = node.input[:3] if node.op_type in RECURRENT_OPS else [*node.output[:1], *node.input[:2]]
    shapes = [known_shape(net, t) for t in tensors if t]
    return any(shape is None or any(d is None for d in shape) for shape in shapes)


def _shape(net: Network, tensor: str) -> list[int] | None:
    shape = known_shape(net, tensor)
    return None if shape is None else [1 if d is None else d for d in shape]
