"""The precision stage from the command line: rules by name, errors, listing names, the plan."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import cache_entries, run_trtpipe

QUERY = "/encoder/layer.0/attention/self/query/MatMul"


def plan_of(run) -> dict:
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    return json.loads((run.run_dir / stage["outputs"]["plan"]["path"]).read_text())


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("precision")
    return workdir, run_trtpipe(workdir, "+recipe=transformer_fp16", run_name="default")


def test_plan_explains_every_node(default_run):
    _, run = default_run
    assert run.code == 0, run.stdout + run.stderr
    plan = plan_of(run)
    assert plan["nodes"] and all({"name", "op_type", "precision", "reason"} <= set(n) for n in plan["nodes"])
    totals = plan["totals"]
    assert totals["nodes"]["fp16"] > 0 and totals["nodes"]["fp32"] > 0
    assert totals["casts_added"] > 0 and 0 < totals["low_precision_flop_share"] <= 1
    assert "FLOPs low precision" in run.stdout


def test_exact_rule_from_the_command_line_changes_one_node(default_run):
    workdir, default = default_run
    ruled = run_trtpipe(workdir, "+recipe=transformer_fp16",
                        f"+precision.rules.query={{match:exact,pattern:'{QUERY}',precision:fp32}}", run_name="ruled")
    assert ruled.code == 0, ruled.stdout + ruled.stderr
    before = {n["name"]: n["precision"] for n in plan_of(default)["nodes"]}
    after = {n["name"]: n["precision"] for n in plan_of(ruled)["nodes"]}
    assert [n for n in before if before[n] != after[n]] == [QUERY]
    assert plan_of(ruled)["rules"] == {"query": [QUERY]}
    assert ruled.statuses()["sanitize"] == "cached"


def test_regex_matching_nothing_exits_2_naming_rule_and_close_names(default_run):
    workdir, _ = default_run
    run = run_trtpipe(workdir, "+recipe=transformer_fp16",
                      "+precision.rules.attn={match:regex,pattern:'layer.0/attention/self/query/MatMul',precision:fp32}",
                      run_name="unmatched")
    assert run.code == 2, run.stdout + run.stderr
    error = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and "precision rule 'attn'" in error[0] and QUERY in error[0], run.stderr
    assert "whole name" in error[0]
    assert run.statuses()["precision"] == "failed"


def test_invalid_regex_exits_2_before_any_stage(tmp_path):
    run = run_trtpipe(tmp_path, "+recipe=transformer_fp16",
                      "+precision.rules.bad={match:regex,pattern:'/encoder/(',precision:fp32}")
    assert run.code == 2
    assert "precision.rules.bad.pattern" in run.stderr and "Traceback" not in run.stderr
    assert not run.run_dir.exists()
    assert cache_entries(tmp_path / "cache") == []


def test_list_only_prints_the_names_rules_resolve_against(default_run):
    workdir, _ = default_run
    run = run_trtpipe(workdir, "+recipe=transformer_fp16", "precision.list_only=true", run_name="names")
    assert run.code == 0, run.stderr
    assert QUERY in run.stdout and "MatMul" in run.stdout
    assert "/encoder/layer.0/attention/output/LayerNorm/Pow" in run.stdout  # absorbed names, for old logs


@pytest.mark.parametrize("recipe", ["nafnet_fp16", "mixed_precision", "fp32"])
def test_other_recipes_run_the_precision_stage(tmp_path, recipe):
    run = run_trtpipe(tmp_path, f"+recipe={recipe}")
    assert run.code == 0, run.stdout + run.stderr
    plan = plan_of(run)
    if recipe == "fp32":
        assert plan["totals"]["nodes"].get("fp16", 0) == 0 and plan["totals"]["casts_added"] == 0
    else:
        assert plan["totals"]["nodes"].get("fp16", 0) > 0
