"""Decide every node's precision, with the reason, from defaults, automatic rules
and user rules.

Order (later steps override earlier ones, so the most explicit intent wins):
1. structure: Casts are kept as authored; nodes without float outputs have no precision; a Q/DQ
   before opset 19 is FP32 (its schema's type), a QuantizeLinear reads its input as produced
   (derived from its producer after steps 6 and 8, qdq_plan.py);
2. authored: nodes whose precision the model's author chose (mixed-precision models);
3. default: `precision.default` for everything else; `fp32` is the baseline, which promotes
   the author's FP16/BF16 compute and Casts instead of step 2 (baseline.py);
4. automatic rules (only over default nodes, only when the default is low precision):
   constants that do not fit, Q/DQ scales FP16 would make subnormal (qdq_scales.py), activation range (except additive masks read by Softmax and
   elementwise chains whose overflow only saturates a Tanh/Sigmoid: saturating_chains.py),
   normalization groups where a member has evidence (evidence_groups.py);
5. user rules, in the order given (later rules override earlier ones); then the cheap nodes
   computing the input of the groups step 4 kept FP32 and the rules left FP32, over the nodes
   still on the default (group_inputs.py: user rules win, a region follows its group);
6. smoothing of isolated low-precision islands (default nodes only);
7. stored tensors: every tensor the materialised plan stores in FP16 fits FP16
   (boundary Casts, graph inputs), checked after smoothing, which makes boundaries too;
8. fewest Casts: cheap default nodes join the FP32 islands where that removes Casts
   (fewest_casts.py; only FP16 -> FP32, so every stored tensor checked in 7 still fits).
"""

from __future__ import annotations

import logging
from typing import Mapping

import numpy as np
import onnx

from trtpipe.precision.network.authored import authored_decisions
from trtpipe.precision.plan.baseline import baseline_note, cast_decision, is_baseline, promote_authored
from trtpipe.precision.auto.auto_constants import constant_decisions, constant_problems, flush_inputs
from trtpipe.precision.auto.auto_boundaries import protect_stored_tensors
from trtpipe.precision.auto.auto_range import node_max_abs, observe_reference, range_decisions
from trtpipe.precision.auto.control_flow import control_flow_initial, derive_control_flow
from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.auto.evidence_groups import group_decisions, moment_tensors
from trtpipe.precision.cut.fewest_casts import fewest_casts
from trtpipe.precision.auto.group_inputs import fp32_groups, input_decisions
from trtpipe.precision.auto.masked_additions import masked_additions
from trtpipe.precision.materialize.type_rules import op_type_rules, opset_versions
from trtpipe.precision.network.network import Network
from trtpipe.precision.auto.norm_groups import normalization_groups
from trtpipe.precision.auto.qdq_plan import derive_quantizers, qdq_initial
from trtpipe.precision.auto.qdq_scales import subnormal_scale_decisions
from trtpipe.precision.auto.saturating_chains import REASON as SATURATION_REASON, find_chains
from trtpipe.precision.network.rules import RuleMatch, compile_rules, resolve_rules
from trtpipe.precision.cut.smoothing import smooth_islands

log = logging.getLogger(__name__)


def plan_precision(
    net: Network, config: Mapping, feeds_list: list[dict[str, np.ndarray]] | None, notes: dict | None = None
) -> tuple[dict[str, Decision], list[RuleMatch]]:
    """`notes`, when given, receives plan-level records: `constants` (flushing constants, their measure
    and decision) and `boundaries` (the stored-tensor check)."""
    default = config["default"]
    rules = compile_rules(config.get("rules") or {})
    matches = resolve_rules(rules, net, config["on_unmatched"])  # before any expensive work
    # The FP32 baseline promotes the author's low precision instead of keeping it (baseline.py).
    authored = authored_decisions(net) if config["respect_authored"] and not is_baseline(default) else {}
    decisions = {name: _initial(net, name, default, authored) for name in net.names}
    promoted = promote_authored(net, decisions) if is_baseline(default) else {}
    observed: dict[str, float] = {}
    reference = None
    moments = None  # the LayerNorm statistics the evidence reads, found once (evidence_groups.py)
    auto = config["auto"]
    if default in LOW_PRECISIONS:
        problems = constant_problems(net, default) if auto["constants"] == "keep_fp32" else {}
        if auto["max_abs"] is not None and default == "fp16" and feeds_list:
            moments = _moments(net, auto)
            keep = flush_inputs(net, problems) | {t for found in moments.values() for t in found.tensors}
            chains = find_chains(net, float(auto["max_abs"]))
            reference = observe_reference(net, feeds_list, keep=keep,
                                          inspect=(lambda values: chains.inspect(net, values)) if chains.chains
                                          else None)
            reference.saturating = chains.tolerated()
        if auto["constants"] == "keep_fp32":
            _apply_auto(decisions, constant_decisions(net, default, problems, reference, notes))
        _apply_auto(decisions, subnormal_scale_decisions(net, default))
        in_range: dict = {}
        if reference is not None:
            observed = node_max_abs(net, reference)
            heavy = auto.get("heavy_max_abs")
            in_range = range_decisions(observed, float(auto["max_abs"]), None if heavy is None else float(heavy),
                                       {name: net.op_type(name) for name in observed})
            masks = masked_additions(net, reference.highest, float(auto["max_abs"])) & set(in_range)
            in_range = {n: found for n, found in in_range.items() if n not in masks}
            if notes is not None:
                notes["masked_additions"] = sorted(masks)
            for name in masks:  # the node's own entry says why it stays low precision beyond max_abs
                if decisions[name].source == "default":
                    decisions[name].reason = (f"{decisions[name].reason}; additive mask read only by Softmax: "
                                              f"beyond max_abs only towards -inf (masked_additions.py)")
            for name, saturating in reference.saturating.items():
                if name in in_range and decisions[name].source == "default":
                    decisions[name].reason = (f"{decisions[name].reason}; " + SATURATION_REASON.format(
                        op=net.op_type(saturating), saturating=saturating))
            in_range = {n: found for n, found in in_range.items() if n not in reference.saturating}
            if notes is not None:
                notes["saturating_chains"] = sorted(reference.saturating)
            _apply_auto(decisions, in_range)
        groups = normalization_groups(net, norms=auto["normalization"], softmax=auto["softmax"])
        _apply_auto(decisions, group_decisions(net, groups, in_range, reference, auto.get("protect", "evidence"),
                                                 moments))
        protected = fp32_groups(net, decisions, groups)
    for match in matches:
        _apply_rule(net, decisions, match)
    _check_effective(matches, decisions, config["on_unmatched"])
    if default in LOW_PRECISIONS:
        _apply_auto(decisions, input_decisions(net, decisions, groups, protected, reference, moments, default))
    if default in LOW_PRECISIONS:
        smooth_islands(net, decisions, int(auto["island_size"]))
    derive_quantizers(net, decisions, default)  # before the checks that materialise the plan
    boundaries = protect_stored_tensors(net, decisions, reference, default, config["keep_io_types"])
    if notes is not None:
        notes["boundaries"] = boundaries
    if default in LOW_PRECISIONS and auto.get("fewest_casts", True):
        placed = fewest_casts(net, decisions, config["keep_io_types"])
        if notes is not None:
            notes["fewest_casts"] = placed
    for name, value in observed.items():
        decisions[name].observed_max_abs = value
    derive_quantizers(net, decisions, default)  # fewest Casts may have moved a producer
    derive_control_flow(net, decisions)
    if notes is not None and is_baseline(default):
        notes["baseline"] = baseline_note(net, decisions, promoted)
    return decisions, matches


def _moments(net: Network, auto: Mapping) -> dict:
    """Where the statistics evidence reads each LayerNorm's moments (evidence_groups.py)."""
    if not auto["normalization"] or auto.get("protect", "evidence") != "evidence":
        return {}
    return moment_tensors(net)


def _check_effective(matches: list[RuleMatch], decisions: dict[str, Decision], on_unmatched: str) -> None:
    """A rule every node of which a later rule sets to another precision has no effect.

    Decision: that is the same silent no-op as a rule matching nothing, so it is treated
    the same way (an error unless precision.on_unmatched=warn), naming the winners.
    """
    from trtpipe.errors import UserError

    for index, match in enumerate(matches):
        own = f"rule {match.rule.name} ("
        targets = [n for n in match.nodes if decisions[n].source != "structure"]
        if not targets or any(decisions[n].reason.startswith(own) for n in targets):
            continue
        winners = sorted({m.rule.name for m in matches[index + 1:] if set(m.nodes) & set(targets)})
        if not winners or all(decisions[n].precision == match.rule.precision for n in targets):
            continue
        if match.rule.optional:  # a recipe's hint that the user's own rules replaced
            log.info("optional precision rule '%s' has no effect: overridden by %s", match.rule.name, ", ".join(winners))
            continue
        message = (f"precision rule '{match.rule.name}' has no effect: every node it matches is set to another "
                   f"precision by the later rule(s) {', '.join(repr(w) for w in winners)}")
        fix = "remove one of them or narrow its pattern (later rules override earlier ones)"
        if on_unmatched == "error":
            raise UserError(message, fix)
        log.warning("%s (ignored: precision.on_unmatched=warn)", message)


def _typed_by_attribute(net: Network, name: str) -> bool:
    """Every float output is bound to a type variable no input shares, and an attribute sets it: the
    op has no float input (ConstantOfShape's `value`, RandomNormal's `dtype`) or carries `dtype`
    (EyeLike, RandomNormalLike). The materialiser keeps such a type (node_types.py), so a plan saying
    fp16 there would be a label the model does not have (the TensorRT-RTX parser logged FLOAT for
    nudenet's "fp16" ConstantOfShape nodes, issue 23). `Constant` is not one: its value is a weight
    the materialiser converts."""
    node = net.nodes[name]
    if node.op_type == "Constant":
        return False
    rules = op_type_rules(node.domain, node.op_type, opset_versions(net.model).get(node.domain, 1))
    outputs = [i for i, t in enumerate(node.output) if t and net.is_float(t)]
    if rules is None or not outputs:
        return False
    bound = {p.type_str for p in rules.inputs}
    for index in outputs:
        parameter = rules.output_parameter(index)
        if parameter is None or not rules.is_type_variable(parameter.type_str) or parameter.type_str in bound:
            return False
    float_input = any(t and net.is_float(t) for t in node.input)
    return not float_input or any(a.name == "dtype" for a in node.attribute)


def _initial(net: Network, name: str, default: str, authored: dict[str, str]) -> Decision:
    if net.op_type(name) == "Cast":
        promoted = cast_decision(net, name) if is_baseline(default) else None
        return promoted or Decision("keep", "Cast: kept as authored", "structure")
    quantized = qdq_initial(net, name, default)
    if quantized is not None:
        return quantized
    if _typed_by_attribute(net, name):
        return Decision("keep", f"{net.op_type(name)}: its output type is set by an attribute, which the "
                                f"materialiser keeps (like a Cast's `to`)", "structure")
    if net.is_control_flow(name):
        return control_flow_initial()
    if not net.computes_float(name):
        return Decision("none", "no float output (integer or shape path)", "structure")
    if all(net.tensor_types.get(t) == onnx.TensorProto.DOUBLE for t in net.float_outputs(name)):
        # The materialiser retypes FP32/FP16/BF16 only (element_types.RETYPABLE): a plan saying
        # fp16 here would be reported but never applied.
        return Decision("keep", "double (fp64) outputs: no lower precision is applied", "structure")
    if name in authored:
        return Decision("keep", authored[name], "authored")
    return Decision(default, f"precision.default={default}", "default")


def _apply_auto(decisions: dict[str, Decision], found: dict[str, tuple[str, float | None]]) -> None:
    for name, (reason, magnitude) in found.items():
        current = decisions.get(name)
        if current is not None and current.source == "default":
            decisions[name] = Decision("fp32", reason, "auto", magnitude)


def _apply_rule(net: Network, decisions: dict[str, Decision], match: RuleMatch) -> None:
    rule = match.rule
    fused_from = {fused: absorbed for absorbed, fused in match.via_fusion.items()}
    for name in match.nodes:
        current = decisions[name]
        if current.source == "structure":
            log.info("rule %s matches %s, which has no float precision to set (%s)", rule.name, name, current.reason)
            continue
        reason = f"rule {rule.name} ({rule.match} {rule.pattern!r})"
        if name in fused_from:
            reason += f", naming {fused_from[name]} which upgrade_opset fused into this node"
        decisions[name] = Decision(rule.precision, reason, "rule", current.observed_max_abs)
