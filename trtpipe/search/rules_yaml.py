"""The search's answer as `precision.rules` YAML a user can paste into a config or recipe.

Decisions:
- Nodes that share a scope (the name up to its last `/`) become one regex
  rule, an alternation of their escaped leaf names (`<scope>/(Pow|ReduceMean_1)`);
  a node alone in its scope gets an `exact` rule. An alternation of exact
  names cannot match a node it does not list, and every rule is resolved
  against the network before it is written: a rule that would match anything
  else (a name absorbed by a fusion) is written as exact rules instead.
- The snippet states at its top, as YAML comments, the settings it assumes:
  every automatic rule off except the constants guard (`keep_fp32`), whose
  nodes the search never moved (a constant that does not fit FP16 is broken
  in FP16 whatever the sample inputs are). With those settings and the user's
  own rules, which name none of the searched nodes, `plan_precision`
  reproduces the searched plan exactly (tested).
- Rule names are `search_fp32_<scope>`, made unique deterministically, so
  the command line can change one rule by name like any other.
"""

from __future__ import annotations

import re

import yaml

from trtpipe.graph.names.parser_names import unique_name
from trtpipe.precision.network.network import Network
from trtpipe.precision.network.rules import compile_rules, resolve_rules

_SHOWN_NAMES = 5


def assumed_settings(low_precision: str, respect_authored: bool | None) -> dict:
    """The precision config the snippet is written for (besides its rules and the user's own);
    `respect_authored` None: the plan kept no node as authored, so either value reproduces it."""
    return {
        "default": low_precision,
        "respect_authored": respect_authored,
        "auto": {"max_abs": None, "constants": "keep_fp32", "normalization": False, "softmax": False,
                 "island_size": 0},
    }


def fp32_rules(net: Network, fp32_nodes: list[str]) -> dict[str, dict]:
    """Rules (name -> {match, pattern, precision}) that set exactly `fp32_nodes` to FP32."""
    by_scope: dict[str, list[str]] = {}
    for name in fp32_nodes:
        by_scope.setdefault(name.rsplit("/", 1)[0] if "/" in name.strip("/") else "", []).append(name)
    rules: dict[str, dict] = {}
    for scope, names in by_scope.items():
        if scope and len(names) > 1:
            leaves = "|".join(re.escape(name[len(scope) + 1:]) for name in names)
            rule = {"match": "regex", "pattern": f"{re.escape(scope)}/({leaves})", "precision": "fp32"}
            if _matches_exactly(net, rule, names):
                rules[unique_name(f"search_fp32_{_slug(scope)}", rules)] = rule
                continue
        for name in names:
            rules[unique_name(f"search_fp32_{_slug(name)}", rules)] = {"match": "exact", "pattern": name,
                                                                   "precision": "fp32"}
    return rules


def rules_yaml(
    rules: dict[str, dict], node_count: int, settings: dict, constant_guarded: list[str], user_rule_nodes: list[str]
) -> str:
    """The ready-to-paste snippet: assumed settings as comments, then `precision: rules: ...`."""
    auto = settings["auto"]
    guarded = f" (on its own keeps FP32: {_some(constant_guarded)})" if constant_guarded else ""
    lines = [
        f"# precision.rules found by trtpipe's accuracy search: {len(rules)} rule(s), FP32 for "
        f"{node_count} node(s).",
        "# They reproduce the searched plan only with the automatic rules off except the constants guard:",
        f"#   precision.default: {settings['default']}",
        f"#   precision.auto.max_abs: {_yaml_value(auto['max_abs'])}",
        f"#   precision.auto.normalization: {_yaml_value(auto['normalization'])}",
        f"#   precision.auto.softmax: {_yaml_value(auto['softmax'])}",
        f"#   precision.auto.constants: {auto['constants']}{guarded}",
        f"#   precision.auto.island_size: {auto['island_size']}",
        "#   precision.respect_authored: " + (
            "true or false (no node of this model is kept as authored)" if settings["respect_authored"] is None
            else _yaml_value(settings["respect_authored"])),
    ]
    if user_rule_nodes:
        lines.append(f"# Keep your own precision.rules as well (they set {_some(user_rule_nodes)}); these name none of "
                     "those nodes.")
    body = yaml.safe_dump({"precision": {"rules": rules}}, sort_keys=False, default_flow_style=False, width=4096)
    return "\n".join(lines) + "\n" + body


def _matches_exactly(net: Network, rule: dict, names: list[str]) -> bool:
    (found,) = resolve_rules(compile_rules({"probe": rule}), net, "warn")
    return sorted(found.nodes) == sorted(names) and not found.via_fusion


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "root"




def _yaml_value(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN_NAMES])
    return shown + (f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else "")
