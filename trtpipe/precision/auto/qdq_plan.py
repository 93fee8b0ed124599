"""QuantizeLinear/DequantizeLinear as plan entries: the plan says the type the written node has (issue 31).

A DQ's precision is its output type, a Q's is its input type (the float side of each; the other
side holds integer or FP8 codes). What that type can be depends on the opset:

- Before opset 19 the schema fixes it: a DQ's output and a Q's input and scale are
  `tensor(float)`. The node is planned `fp32` (structure: no rule can change a schema), with the
  reason `opset < 19`, so the plan says what the written model does (the DQ outputs FP32 and a Cast
  follows it where its reader is FP16) and the Casts it costs are charged to that reason
  (plan/cast_reasons.py). upgrade_opset raises a Q/DQ model to 19 unless the target is pinned.
- From opset 19 the scale shares the float side's type, so the materialiser types the scale with the
  node (weight_types.py) and no Cast is needed:
  - a DQ is an ordinary node on the default precision: planned FP16, its scale is stored FP16 and it
    outputs FP16 for its FP16 consumer;
  - a Q follows its producer (`derive_quantizers`, after every step that decides producers): it reads
    the type its input is produced in, its scale is stored in that type, so a Q never costs a Cast
    in front of it. An input the plan does not type (a graph input, a weight, a node kept as
    authored) is read as authored: a weight is quantized from its authored values, not from an FP16
    copy, and a graph input kept FP32 is not cast for its Q. Under the FP32 baseline
    (`precision.default=fp32`) every Q reads FP32: the baseline promises FP32 compute.
- Never a scale stored in FP16 below FP16's normal range (qdq_scales.py): such a DQ stays FP32
  (automatic rule) and a Q whose producer is low precision reads FP32 (a Cast, `subnormal scale`).
"""

from __future__ import annotations

from trtpipe.precision.auto.qdq_scales import (
    QDQ_OPS,
    SUBNORMAL_KIND,
    scale_follows_node,
    subnormal_scale_decisions,
)
from trtpipe.precision.materialize.type_rules import opset_versions
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.network.element_types import RETYPABLE, short_name
from trtpipe.precision.network.network import Network

# Reason kinds that name why a Cast next to a Q/DQ remains (`casts_by_reason`, cast_reasons.py).
OPSET_KIND = "opset < 19"
REASON_KINDS = (OPSET_KIND, SUBNORMAL_KIND)
_PLANNED = ("fp32", "fp16", "bf16")


def is_qdq(net: Network, name: str) -> bool:
    node = net.nodes[name]
    return node.op_type in QDQ_OPS and node.domain in DEFAULT_DOMAINS


def qdq_initial(net: Network, name: str, default: str) -> Decision | None:
    """The first decision of a Q/DQ node (planner step 1), or None for any other node."""
    if not is_qdq(net, name):
        return None
    node = net.nodes[name]
    if not scale_follows_node(node, opset_versions(net.model).get(node.domain, 1)):
        side = "output" if node.op_type == "DequantizeLinear" else "input and scale"
        return Decision("fp32", f"{OPSET_KIND}: {node.op_type}'s {side} is tensor(float) in the schema before "
                                "opset 19 (upgrade_opset.target=19 or null lets its scale carry FP16)", "structure")
    if node.op_type == "QuantizeLinear":
        return Decision("keep", "QuantizeLinear: reads its input as produced (set once its producer is decided)",
                        "structure")
    return None  # a DequantizeLinear at opset >= 19: a node like any other (its output type is its precision)


def derive_quantizers(net: Network, decisions: dict[str, Decision], low_precision: str) -> None:
    """Set every QuantizeLinear at opset >= 19 to its input's type, in place (module docstring).

    Decision: derived, like a control-flow node's precision (control_flow.py), and called again after
    every step that moves producers (the search, the repair), so the Q never disagrees with its input.
    Known limit: within the search's and the repair's trials a Q keeps the precision derived from the
    automatic plan (a fixed node, search/trials.py); the final plan re-derives it, and validate judges
    that final model.
    """
    subnormal = None
    for name in net.names:
        decision = decisions[name]
        if net.op_type(name) != "QuantizeLinear" or decision.source != "structure" \
                or decision.reason.startswith(OPSET_KIND) or not is_qdq(net, name):
            continue
        tensor = net.nodes[name].input[0]
        if low_precision not in LOW_PRECISIONS:  # the FP32 baseline computes every Q in FP32 (baseline.py)
            decisions[name] = Decision("fp32", f"QuantizeLinear: precision.default={low_precision}: reads its input "
                                               "in FP32 (opset >= 19 types its scale with it)", "structure")
            continue
        precision, origin = _produced_as(net, decisions, tensor)
        if precision is None:
            continue
        if precision != "fp32":
            subnormal = subnormal_scale_decisions(net, low_precision) if subnormal is None else subnormal
            if name in subnormal:
                decisions[name] = Decision("fp32", subnormal[name][0], "structure")
                continue
        decisions[name] = Decision(precision, f"QuantizeLinear: reads its input {tensor!r} as {origin} gives it "
                                              f"({precision}; opset >= 19 types its scale with it)", "structure")


def _produced_as(net: Network, decisions: dict[str, Decision], tensor: str) -> tuple[str | None, str]:
    """The precision `tensor` is produced in under the plan, and who decides it."""
    producer = net.producer.get(tensor)
    if tensor not in net.constants and producer is not None and decisions[producer].precision in _PLANNED:
        return decisions[producer].precision, f"its producer {producer!r}"
    authored = net.tensor_types.get(tensor)
    if authored not in RETYPABLE:
        return None, ""
    origin = "the model stores it" if tensor in net.constants else (
        "the graph input" if producer is None else f"{producer!r} (as authored)")
    return short_name(authored), origin
