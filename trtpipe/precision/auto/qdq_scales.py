"""Automatic rule: a QuantizeLinear/DequantizeLinear whose scale FP16 would make subnormal stays FP32.

From opset 19 a Q/DQ's scale shares the type of the float side (DQ: its output, Q: its input),
so planning the node FP16 stores its scale in FP16 (the materialiser types weights by their
consumer, weight_types.py). Below FP16's normal range (2^-14 ≈ 6.1e-5) an FP16 value keeps
a fixed absolute step of 2^-24, so a scale there loses relative precision (up to 33% at
7.5e-8) or flushes to zero, and every value the node dequantizes moves by that much: ONNX
Runtime's INT32 bias DQs carry scales of input scale × weight scale, 7.5e-8 to 1.5e-6 on a
ResNet-18 (issue 31: rel_l2 0.063 against 0.044, with nothing in the plan saying why).

Decisions:
- Any non-zero |value| below 2^-14 keeps the node FP32, so its scale stays FP32: a scale is
  a few values (one per channel at most), and each multiplies a whole channel, so no share of
  values is negligible (unlike a weight's few denormals, auto_constants.py). Zero is exact.
- Only where the scale follows the node's precision (the schema binds it to the float side's
  type variable: opset >= 19); before 19 a scale is FP32 whatever the plan says.
- The scale is found through the weight passthrough chain the materialiser retypes with it
  (Identity, Reshape, ...: weight_types.py); a computed scale is the computing node's business.
- Like every automatic rule it applies to nodes on the default precision; a user rule wins. A
  QuantizeLinear follows its producer (qdq_plan.py), which reads these decisions for it.
- The reason starts with its kind, `subnormal scale`, which names the Casts it costs.
"""

from __future__ import annotations

import numpy as np

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.materialize.type_rules import op_type_rules, opset_versions
from trtpipe.precision.materialize.weight_types import WEIGHT_PASSTHROUGH_OPS
from trtpipe.precision.network.decisions import FP16_MIN_NORMAL
from trtpipe.precision.network.network import FLOAT_TYPES, Network

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
SCALE = 1  # the input slot of y_scale / x_scale
# The kind that starts each reason, naming the Casts it costs in `casts_by_reason` (cast_reasons.py).
SUBNORMAL_KIND = "subnormal scale"


def subnormal_scale_decisions(net: Network, low_precision: str) -> dict[str, tuple[str, float]]:
    """node -> (reason, smallest |scale|): the Q/DQ nodes that must stay FP32 for their scale."""
    if low_precision != "fp16":  # BF16 has FP32's exponent range
        return {}
    opsets = opset_versions(net.model)
    decisions = {}
    for name in net.names:
        node = net.nodes[name]
        if node.op_type not in QDQ_OPS or node.domain not in DEFAULT_DOMAINS or len(node.input) <= SCALE:
            continue
        if not scale_follows_node(node, opsets.get(node.domain, 1)):
            continue
        constant = _scale_constant(net, node.input[SCALE])
        if constant is None:
            continue
        smallest = _smallest_subnormal(tensor_array(net.constants[constant]))
        if smallest is not None:
            decisions[name] = (f"{SUBNORMAL_KIND}: scale {constant} has |value| {smallest:.3g} < "
                               f"{FP16_MIN_NORMAL:.3g}, below fp16's normal range: stored in fp16 (opset >= 19 "
                               "types a scale with its node) it would lose precision or flush to 0, moving every "
                               "value the node (de)quantizes; kept FP32 so the scale stays FP32", smallest)
    return decisions


def scale_follows_node(node, opset: int) -> bool:
    rules = op_type_rules(node.domain, node.op_type, opset)
    if rules is None:
        return False
    scale = rules.input_parameter(SCALE)
    return scale is not None and rules.is_type_variable(scale.type_str) and len(
        rules.float_types_of_variable[scale.type_str]) > 1


def _scale_constant(net: Network, tensor: str) -> str | None:
    """The initializer or Constant whose values reach `tensor` through weight passthrough ops."""
    while tensor not in net.constants:
        producer = net.producer.get(tensor)
        node = net.nodes.get(producer) if producer else None
        if node is None or node.op_type not in WEIGHT_PASSTHROUGH_OPS or not node.input:
            return None
        tensor = node.input[0]
    return tensor if net.constants[tensor].data_type in FLOAT_TYPES else None


def _smallest_subnormal(values: np.ndarray) -> float | None:
    magnitudes = np.abs(values.astype(np.float64).ravel())
    below = magnitudes[(magnitudes > 0) & (magnitudes < FP16_MIN_NORMAL)]
    return float(below.min()) if below.size else None
