"""Automatic rule: normalization groups kept FP32 as one unit.

A LayerNorm is one computation whether it is one `LayerNormalization` node or
nine decomposed nodes; keeping half of it FP32 would put Casts in the middle of
the variance. Groups found here: fused LayerNormalization / RMSNormalization /
GroupNormalization / InstanceNormalization nodes, decomposed LayerNorm
(ReduceMean → Sub → Pow|Mul → ReduceMean → Add → Sqrt → Div [→ Mul → Add]) over
any axes (so NAFNet's channel-wise LayerNorm2d too) and the forms other exporters
write (E[x^2] - E[x]^2, ReduceSum / N, Rsqrt as Sqrt + Reciprocal, Keras'
`x * inv + (beta - mean * inv)`: layernorm_groups.py), decomposed RMSNorm
(Pow → ReduceMean → Add → Sqrt → Div|Reciprocal [→ Mul]), and Softmax; a ReduceMean may be
tf2onnx's GlobalAveragePool (a mean over [2, rank), layernorm_groups.MEAN_OPS).

Decision: in the reciprocal form `x * rsqrt(mean(x²) + eps)` (T5's RMSNorm, which
torch exports as `Div(1, Sqrt(.))` then `Mul(x, .)`), the `Mul` that applies
1/rms to the normalised tensor belongs to the group: without it the group stops
at a scale factor, and the gain `Mul` after it was never reached (its input is
not the group's). Only a Mul whose other input is the tensor the group squared
(or, for LayerNorm, the centred tensor) qualifies, so nothing outside the norm
is pulled in.
"""

from __future__ import annotations

from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.auto.layernorm_groups import MEAN_OPS, layernorm_group
from trtpipe.precision.network.network import Network

FUSED_NORMS = {"LayerNormalization", "RMSNormalization", "GroupNormalization", "InstanceNormalization",
               "SimplifiedLayerNormalization"}
SOFTMAX_OPS = {"Softmax", "LogSoftmax"}


def normalization_groups(net: Network, *, norms: bool, softmax: bool) -> dict[str, str]:
    """node -> group label (the group's anchor node and kind)."""
    groups: dict[str, str] = _layernorm_groups(net) if norms else {}
    for name in net.names:
        op = net.op_type(name)
        if norms and op in FUSED_NORMS:
            groups[name] = f"{op} {name}"
        elif softmax and op in SOFTMAX_OPS:
            groups[name] = f"{op} {name}"
        elif norms and _is_square(net, name):
            members, kind = _decomposed_group(net, name)
            if members:
                label = f"decomposed {kind} around {name}"
                for member in members:
                    groups.setdefault(member, label)
    return groups


def _layernorm_groups(net: Network) -> dict[str, str]:
    """LayerNorms found by their variance (layernorm_groups.py: other exporters' forms too); first, so
    the square-first walk below does not split them."""
    groups: dict[str, str] = {}
    for name in net.names:
        found = None if name in groups else layernorm_group(net, name)
        if found:
            members, form = found
            for member in members:
                groups.setdefault(member, f"decomposed LayerNorm ({form}) around {name}")
    return groups


def _is_square(net: Network, name: str) -> bool:
    node = net.nodes[name]
    if node.op_type == "Pow" and len(node.input) == 2:
        exponent = net.constants.get(node.input[1])
        if exponent is not None:
            value = tensor_array(exponent)
            return value.size == 1 and float(value.ravel()[0]) == 2.0
    return node.op_type == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]


def _decomposed_group(net: Network, square: str) -> tuple[list[str], str]:
    members = [square]
    squared_input = net.nodes[square].input[0]
    centre = net.producer.get(squared_input)
    kind = "RMSNorm"
    if centre and net.op_type(centre) == "Sub":
        mean = net.producer.get(net.nodes[centre].input[1])
        if mean and net.op_type(mean) in MEAN_OPS:
            members = [mean, centre, square]
            kind = "LayerNorm"
    chain = _follow(net, net.nodes[square].output[0], ["ReduceMean", "Add", "Sqrt"])
    if len(chain) < 3:
        return [], kind
    members += chain
    tail = _single_consumer(net, net.nodes[chain[-1]].output[0])
    if tail is None or net.op_type(tail) not in ("Div", "Reciprocal"):
        return [], kind
    members.append(tail)
    current = tail
    if _is_reciprocal(net, tail):
        applied = _single_consumer(net, net.nodes[tail].output[0])
        normalised = {squared_input} | ({net.nodes[centre].output[0]} if kind == "LayerNorm" else set())
        if applied is None or net.op_type(applied) != "Mul" or not normalised & set(net.nodes[applied].input):
            return members, kind
        members.append(applied)
        current = applied
    for op in ("Mul", "Add"):  # the affine part: gamma, then beta
        nxt = _single_consumer(net, net.nodes[current].output[0])
        if nxt is None or net.op_type(nxt) != op or not any(i in net.constants for i in net.nodes[nxt].input):
            break
        members.append(nxt)
        current = nxt
    return members, kind


def _is_reciprocal(net: Network, name: str) -> bool:
    """`Reciprocal(s)` or `Div(1, s)`: the tail yields 1/rms rather than the normalised tensor."""
    node = net.nodes[name]
    if node.op_type == "Reciprocal":
        return True
    one = net.constants.get(node.input[0]) if node.op_type == "Div" else None
    if one is None:
        return False
    value = tensor_array(one)
    return value.size == 1 and float(value.ravel()[0]) == 1.0


def _follow(net: Network, tensor: str, ops: list[str]) -> list[str]:
    chain = []
    for op in ops:
        nxt = _single_consumer(net, tensor)
        if nxt is None or not (net.op_type(nxt) == op or (op == "ReduceMean" and net.op_type(nxt) in MEAN_OPS)):
            break
        chain.append(nxt)
        tensor = net.nodes[nxt].output[0]
    return chain


def _single_consumer(net: Network, tensor: str) -> str | None:
    consumers = net.consumers.get(tensor, [])
    return consumers[0] if len(consumers) == 1 else None
