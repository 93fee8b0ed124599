"""Named precision rules: compiled at startup, resolved against the parsed network.

Decisions:
- `regex` is a full match (anchored at both ends) — a pattern matches a name, not
  part of one; `exact` is exact; `op_type` matches the ONNX op type exactly.
- An invalid regex fails before any stage runs, naming the rule. A regex that
  backtracks catastrophically against the node names (e.g. `(a+)+$`) fails
  after `bounded_regex.MATCH_SECONDS` with a message naming the rule: the
  matching runs in a forked worker with a deadline (graph/names/bounded_regex.py).
- A rule that matches nothing is an error by default, with the closest names:
  the silent no-op of `trtexec --layerPrecisions` wildcards and of Polygraphy's
  exact-name matching is the bug trtpipe exists to fix.
- `optional: true` marks a rule whose miss is not an error: a recipe's hint keyed
  to the built-in model's names must not stop a user's model (other exporters
  name nodes differently). A miss is an info line in trtpipe.log and listed under
  `rules_unmatched_optional` in the plan. Rules are required by default, so a rule
  the user writes that matches nothing stays an error.
- Nodes inside If/Loop/Scan bodies are matched by their qualified name
  `<control node>/<then_branch|else_branch|body>/<node>` (graph/names/scopes.py) and by
  op type; a rule that matches a control-flow node also covers every node of its
  bodies (its precision is its body's, control_flow.py). An exact rule naming a
  body node by its bare ONNX name is told the qualified name.
- A rule naming a node that `upgrade_opset` fused away (users copy names from the
  exporter or an old build log) resolves to the fused node, and says so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from trtpipe.config.closest import by_closeness, closest
from trtpipe.errors import UserError
from trtpipe.graph.names.bounded_regex import fullmatches

if TYPE_CHECKING:  # the network needs onnx; checking a config's rules must not
    from trtpipe.precision.network.network import Network

log = logging.getLogger(__name__)

MATCH_KINDS = ("exact", "regex", "op_type")
PRECISIONS = ("fp32", "fp16", "bf16")
RULE_FIELDS = ("match", "pattern", "precision", "optional")
# The override that turns a rule matching nothing into a warning (named in the error's Fix).
ALLOW_UNMATCHED = "precision.on_unmatched=warn"


@dataclass(frozen=True)
class Rule:
    name: str
    match: str
    pattern: str
    precision: str
    regex: re.Pattern | None = None
    optional: bool = False


@dataclass
class RuleMatch:
    rule: Rule
    nodes: list[str]
    via_fusion: dict[str, str]  # absorbed name the rule named -> fused node it resolved to


def compile_rules(rules: Mapping[str, Mapping]) -> list[Rule]:
    """Check every rule's fields and compile regexes; UserError naming the rule."""
    compiled = []
    for name, spec in rules.items():
        key = f"precision.rules.{name}"
        if not isinstance(spec, Mapping):
            raise UserError(f"{key} is {spec!r}, not a rule", "write {match: exact|regex|op_type, pattern: ..., precision: fp32}")
        unknown = sorted(set(spec) - set(RULE_FIELDS))
        if unknown:
            raise UserError(f"config key '{key}.{unknown[0]}' is not a rule field", f"a rule has {', '.join(RULE_FIELDS)}")
        match, pattern = spec.get("match", "exact"), spec.get("pattern")
        precision = spec.get("precision", "fp32")
        if match not in MATCH_KINDS:
            raise UserError(f"{key}.match is {match!r}", f"use one of {', '.join(MATCH_KINDS)}")
        if precision not in PRECISIONS:
            raise UserError(f"{key}.precision is {precision!r}", f"use one of {', '.join(PRECISIONS)}")
        optional = spec.get("optional", False)
        if not isinstance(optional, bool):
            raise UserError(f"{key}.optional is {optional!r}", "use true or false")
        if not pattern:
            raise UserError(f"{key}.pattern is empty", "give the node name, regex or op type to match")
        regex = None
        if match == "regex":
            try:
                regex = re.compile(pattern)
            except re.error as error:
                raise UserError(
                    f"{key}.pattern {pattern!r} is not a valid regular expression ({error})",
                    "fix the regex (it is matched against whole node names, e.g. '/encoder/.*/LayerNorm/.*')",
                ) from None
        compiled.append(Rule(name, match, pattern, precision, regex, optional))
    return compiled


def resolve_rules(rules: list[Rule], net: Network, on_unmatched: str) -> list[RuleMatch]:
    matches = [_resolve(rule, net) for rule in rules]
    for found in matches:
        if found.nodes:
            for absorbed, fused in found.via_fusion.items():
                log.info("rule %s names %s, which upgrade_opset fused into %s", found.rule.name, absorbed, fused)
            continue
        message, suggestion = _unmatched_message(found.rule, net)
        if found.rule.optional:
            log.info("%s: skipped (optional: true)", message)
            continue
        if on_unmatched == "error":
            raise UserError(message, f"{suggestion}; or, to go on without the rule, '{ALLOW_UNMATCHED}'")
        log.warning("%s; %s (ignored: %s)", message, suggestion, ALLOW_UNMATCHED)
    return matches


def unmatched_optional(matches: list[RuleMatch]) -> list[str]:
    """Names of the optional rules that matched nothing (recorded in the plan)."""
    return [m.rule.name for m in matches if m.rule.optional and not m.nodes]


def _resolve(rule: Rule, net: Network) -> RuleMatch:
    via_fusion: dict[str, str] = {}
    if rule.match == "op_type":
        nodes = [n for n in net.names if net.op_type(n) == rule.pattern]
    elif rule.match == "exact":
        nodes = [rule.pattern] if rule.pattern in net.nodes else []
        if not nodes and rule.pattern in net.absorbed_by:
            nodes = [net.absorbed_by[rule.pattern]]
            via_fusion[rule.pattern] = nodes[0]
    else:
        # Time-bounded (a pathological regex is a UserError naming the rule, not a hang).
        matched = set(fullmatches(rule.regex, [*net.absorbed_by, *net.names], f"precision rule {rule.name!r}"))
        for absorbed, fused in net.absorbed_by.items():
            if absorbed in matched and fused in net.nodes:
                via_fusion[absorbed] = fused
        fused_targets = set(via_fusion.values())
        nodes = [n for n in net.names if n in fused_targets or n in matched]
    if net.bodies:
        nodes = list(dict.fromkeys(n for found in nodes for n in [found, *net.body_descendants(found)]))
    return RuleMatch(rule, nodes, via_fusion)


def _unmatched_message(rule: Rule, net: Network) -> tuple[str, str]:
    """The problem, and what to suggest, the same way for the three kinds: the closest node names
    (exact, regex) or the model's op types closest first (op_type: a short list). The error's Fix
    adds the override that lets the run go on without the rule, quoted so it pastes as it is."""
    what = {"exact": "node name", "regex": "full-match regex", "op_type": "op type"}[rule.match]
    message = f"precision rule '{rule.name}' ({what} {rule.pattern!r}) matches no node of the network"
    if rule.match == "op_type":
        op_types = sorted({net.op_type(n) for n in net.names})
        suggestion = f"op types in the model, closest first: {', '.join(by_closeness(rule.pattern, op_types))}"
    else:
        suggestion = f"closest node names: {', '.join(_closest_names(rule, net)) or 'none (no nodes)'}"
    if rule.match == "regex":
        suggestion += "; a regex must match the whole name (add .* where needed)"
    return message, suggestion


def _closest_names(rule: Rule, net: Network) -> list[str]:
    """Three names: a body node named without its scope gets its qualified name; else the closest
    of the network's names (a regex compared without its metacharacters), however far."""
    if rule.match == "exact":
        qualified = [n for n in net.parent if n.endswith("/" + rule.pattern)][:3]
        if qualified:
            return qualified
    candidates = sorted(set(net.names) | set(net.absorbed_by))
    probe = rule.pattern if rule.match != "regex" else re.sub(r"[\\.*+?^$()\[\]{}|]", "", rule.pattern)
    return closest(probe, candidates, n=3, cutoff=0.4) or by_closeness(probe, candidates)[:3]
