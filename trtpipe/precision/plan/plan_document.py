"""`precision_plan.json`: every node's precision and why, per rule what it matched,
and the totals users look at first.

Contract (DESIGN.md): `nodes` (list of {name, op_type, precision, reason}),
`rules` (name -> matched node names), `totals`.
"""

from __future__ import annotations

from collections import Counter

import onnx

from trtpipe.precision.plan.cast_reasons import casts_by_reason
from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.network.flops import has_unknown_dims, node_flops
from trtpipe.precision.network.network import Network
from trtpipe.precision.network.rules import RuleMatch, unmatched_optional

PLAN_FORMAT = 1


def plan_document(net: Network, decisions: dict[str, Decision], matches: list[RuleMatch],
                  default: str, materialized: dict) -> dict:
    nodes = []
    for name in net.names:
        decision = decisions[name]
        entry = {"name": name, "op_type": net.op_type(name), "precision": decision.precision,
                 "reason": decision.reason, "source": decision.source}
        if decision.observed_max_abs is not None:
            entry["observed_max_abs"] = _rounded(decision.observed_max_abs)
        nodes.append(entry)
    return {
        "format": PLAN_FORMAT,
        "default": default,
        "nodes": nodes,
        "rules": {m.rule.name: list(m.nodes) for m in matches},
        "rules_via_fusion": {m.rule.name: m.via_fusion for m in matches if m.via_fusion},
        "rules_unmatched_optional": unmatched_optional(matches),
        "totals": totals(net, decisions, materialized),
    }


def totals(net: Network, decisions: dict[str, Decision], materialized: dict) -> dict:
    per_precision = Counter(d.precision for d in decisions.values())
    flops_total = flops_low = 0
    unknown = 0
    for name in net.names:
        flops = node_flops(net, name)
        unknown += has_unknown_dims(net, name)
        flops_total += flops
        if computes_low(net, decisions[name], name):
            flops_low += flops
    return {
        "nodes": dict(sorted(per_precision.items())),
        "casts_added": int(materialized["casts_added"]["count"]),
        # Which protective reason each added Cast serves (cast_reasons.py).
        "casts_by_reason": casts_by_reason(net, decisions, materialized["casts_added"].get("casts", [])),
        # Every Cast of the written model by how often it runs: `once`, or on every step of the
        # Loop/Scan whose body holds it, `per_step` by loop node (cast_steps.py).
        "casts": materialized["casts"],
        # Shapes: as the sample data gives them (flop_shapes.py); `nodes_with_unknown_dims` counted
        # a dimension nothing could resolve as 1.
        "flops": {"total": flops_total, "low_precision": flops_low, "nodes_with_unknown_dims": unknown},
        "low_precision_flop_share": round(flops_low / flops_total, 6) if flops_total else 0.0,
        "saturated": materialized.get("saturated", []),
    }


def computes_low(net: Network, decision: Decision, name: str) -> bool:
    """Planned low precision, or kept as authored in low precision."""
    if decision.precision in LOW_PRECISIONS:
        return True
    return decision.precision == "keep" and any(
        net.tensor_types.get(t) in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16) for t in net.float_outputs(name)
    )


def summary_line(document: dict) -> str:
    counts = document["totals"]["nodes"]
    low = sum(counts.get(p, 0) for p in LOW_PRECISIONS)
    share = document["totals"]["low_precision_flop_share"] * 100
    line = (f"{low} {document['default'].upper() if document['default'] != 'fp32' else 'low-precision'} / "
            f"{counts.get('fp32', 0)} FP32 nodes, {counts.get('keep', 0)} kept as authored, "
            f"{document['totals']['casts_added']} Casts, {share:.1f}% FLOPs low precision")
    baseline = document.get("baseline")
    if baseline and (baseline["promoted"] or baseline["casts_promoted"]):  # plan/baseline.py
        line += (f"; FP32 baseline: promoted {baseline['promoted']} authored {baseline['types']} node(s) "
                 f"and {baseline['casts_promoted']} Cast(s) to FP32")
    return line


def _rounded(value: float) -> float:
    return float(f"{value:.6g}")
