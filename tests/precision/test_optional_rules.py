"""`optional: true` on a rule: a miss is logged and recorded, never an error; required rules still fail."""

from __future__ import annotations

import logging

import pytest

from tests.precision.graphs import mlp
from trtpipe.errors import UserError
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.network.rules import compile_rules, resolve_rules, unmatched_optional


def network():
    model = mlp()
    name_nodes_as_parser_does(model)
    return network_from_model(model)


def test_optional_must_be_a_boolean():
    with pytest.raises(UserError, match="precision.rules.hint.optional"):
        compile_rules({"hint": {"match": "regex", "pattern": ".*", "optional": "yes"}})


def test_an_optional_miss_is_an_info_line_and_listed(caplog):
    rules = compile_rules({"hint": {"match": "regex", "pattern": ".*/norm[0-9]+/Pow", "optional": True}})
    with caplog.at_level(logging.INFO, logger="trtpipe.precision.network.rules"):
        matches = resolve_rules(rules, network(), "error")
    assert unmatched_optional(matches) == ["hint"]
    assert "skipped (optional: true)" in caplog.text


def test_a_required_miss_is_still_an_error():
    rules = compile_rules({"mine": {"match": "regex", "pattern": ".*/norm[0-9]+/Pow"}})
    with pytest.raises(UserError, match="precision rule 'mine'"):
        resolve_rules(rules, network(), "error")
