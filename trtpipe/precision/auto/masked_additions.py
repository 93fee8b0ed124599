"""An additive attention mask: an `Add` whose only overflow is towards -inf, read only by Softmax.

`scores + mask` with a mask of -1e9 or -3.4e38 is far beyond FP16's range, but
only downwards: in FP16 the mask is -inf, the sum is -inf, and Softmax maps it
to 0, exactly what the reference's exp of the huge negative value gives. So
neither the range rule nor the stored-tensor check needs the Add in FP32
(auto_boundaries.py tolerates Softmax reading such a tensor for the same
reason). Keeping it FP32 cost two Casts per attention layer.

Decisions:
- Only `Add` (a Sub would turn a -inf subtrahend into +inf), only when every
  reader of its output is Softmax (on its data input; LogSoftmax keeps -inf), and only
  when the largest value of the output and of every float input fits
  (`highest`, signed, from the reference run): nothing overflows upwards.
- A row masked entirely gives NaN in FP16 where the reference gives a uniform
  row; the emulated validation sees that on the sample inputs.
"""

from __future__ import annotations

from trtpipe.precision.network.network import Network

# Readers for which an input of -inf gives exactly what the huge negative value gives in FP32 (0).
# Not LogSoftmax: it maps -inf to -inf, where the reference is finite (a later 0 * -inf is NaN).
NEGATIVE_INF_SAFE = frozenset({"Softmax"})


def is_masked_addition(net: Network, name: str, highest: dict[str, float], limit: float) -> bool:
    node = net.nodes[name]
    if node.op_type != "Add" or len(node.output) != 1:
        return False
    output = node.output[0]
    readers = net.consumers.get(output, [])
    if not readers or any(net.op_type(r) not in NEGATIVE_INF_SAFE or net.nodes[r].input[0] != output for r in readers):
        return False
    tensors = [output] + [t for t in node.input if t and net.is_float(t) and t not in net.constants]
    return all(highest.get(t, float("inf")) <= limit for t in tensors)


def masked_additions(net: Network, highest: dict[str, float], limit: float) -> set[str]:
    return {name for name in net.names if is_masked_addition(net, name, highest, limit)}
