"""Precision rules: exact, regex (full match), op_type; order; unmatched; fused names."""

from __future__ import annotations

import logging

import pytest

from tests.precision.models import precision_config, prepared
from trtpipe.errors import UserError
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision
from trtpipe.precision.network.rules import compile_rules


def plan(model_name: str, fuse: bool = True, **config):
    model = prepared(model_name, fuse)
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    # Automatic rules off: these tests isolate the user rules.
    cfg = precision_config(auto={"max_abs": None, "constants": "off", "normalization": False}, **config)
    decisions, matches = plan_precision(net, cfg, None)
    return {n: d.precision for n, d in decisions.items()}, decisions, matches


def rule(match: str, pattern: str, precision: str = "fp32") -> dict:
    return {"match": match, "pattern": pattern, "precision": precision}


def test_exact_rule_changes_exactly_one_node():
    base, _, _ = plan("transformer")
    ruled, decisions, matches = plan("transformer", rules={"q": rule("exact", "/encoder/layer.0/attention/self/query/MatMul")})
    changed = [n for n in base if base[n] != ruled[n]]
    assert changed == ["/encoder/layer.0/attention/self/query/MatMul"]
    assert decisions[changed[0]].reason.startswith("rule q (exact")
    assert matches[0].nodes == changed


def test_regex_is_a_full_match():
    _, _, matches = plan("transformer", rules={"attn": rule("regex", "/encoder/layer\\.0/attention/self/.*MatMul")})
    assert matches[0].nodes and all(n.startswith("/encoder/layer.0/attention/self/") for n in matches[0].nodes)
    with pytest.raises(UserError) as caught:
        plan("transformer", rules={"partial": rule("regex", "layer\\.0/attention/self/query/MatMul")})
    message = str(caught.value)
    assert "precision rule 'partial'" in message and "matches no node" in message
    assert "/encoder/layer.0/attention/self/query/MatMul" in message  # the closest name is suggested
    assert "\n" not in message


def test_op_type_rule_and_later_rules_override_earlier():
    ruled, decisions, _ = plan("transformer", rules={
        "softmax_fp32": rule("op_type", "Softmax"),
        "but_layer1_fp16": rule("regex", "/encoder/layer\\.1/.*/Softmax", "fp16"),
    })
    assert ruled["/encoder/layer.0/attention/self/Softmax"] == "fp32"
    assert ruled["/encoder/layer.1/attention/self/Softmax"] == "fp16"
    assert decisions["/encoder/layer.1/attention/self/Softmax"].reason.startswith("rule but_layer1_fp16")


def test_exact_name_of_a_fused_node_resolves_to_the_fusion():
    absorbed = "/encoder/layer.0/attention/output/LayerNorm/Pow"
    ruled, decisions, matches = plan("transformer", rules={"ln": rule("exact", absorbed)})
    fused = "/encoder/layer.0/attention/output/LayerNorm/LayerNormalization"
    assert matches[0].nodes == [fused]
    assert matches[0].via_fusion == {absorbed: fused}
    assert ruled[fused] == "fp32" and absorbed in decisions[fused].reason


def test_unmatched_rule_warns_when_configured(caplog):
    with caplog.at_level(logging.WARNING):
        plan("transformer", rules={"typo": rule("exact", "/encoder/layer.0/attention/self/MatMull")},
             on_unmatched="warn")
    assert "precision rule 'typo'" in caplog.text and "/encoder/layer.0/attention/self/MatMul" in caplog.text


def test_unknown_op_type_suggests_real_op_types():
    with pytest.raises(UserError, match="op types in the model, closest first: Softmax,"):
        plan("transformer", rules={"s": rule("op_type", "SoftMax")})


def test_invalid_regex_names_the_rule():
    with pytest.raises(UserError, match="precision.rules.bad.pattern .* is not a valid regular expression"):
        compile_rules({"bad": rule("regex", "/encoder/(")})


@pytest.mark.parametrize("field, value", [("match", "glob"), ("precision", "int8")])
def test_invalid_rule_fields_are_user_errors(field, value):
    spec = {**rule("exact", "x"), field: value}
    with pytest.raises(UserError, match=f"precision.rules.r.{field}"):
        compile_rules({"r": spec})


def test_rule_on_an_integer_node_changes_nothing():
    ruled, decisions, _ = plan("transformer", rules={"shape": rule("op_type", "Cast")})
    casts = [n for n, d in decisions.items() if d.reason.startswith("Cast")]
    assert casts and all(ruled[n] == "keep" for n in casts)


def test_a_rule_entirely_overridden_by_a_later_one_is_an_error():
    with pytest.raises(UserError, match="precision rule 'all_softmax' has no effect.*'softmax_fp16'"):
        plan("transformer", rules={"all_softmax": rule("op_type", "Softmax", "fp32"),
                                   "softmax_fp16": rule("regex", ".*/Softmax", "fp16")})
    # Partly overridden is fine: the earlier rule still decides some nodes.
    ruled, _, _ = plan("transformer", rules={"all_softmax": rule("op_type", "Softmax", "fp32"),
                                             "one_fp16": rule("regex", ".*layer\\.1.*/Softmax", "fp16")})
    assert ruled["/encoder/layer.0/attention/self/Softmax"] == "fp32"
