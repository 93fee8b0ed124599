"""The pipeline on a model with an If whose branches hold the compute, from the command line."""

from __future__ import annotations

import json

import numpy as np
import onnx

from tests.cli_helpers import run_trtpipe
from tests.precision.subgraph_graphs import feeds_for, if_matmul

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"


def plan_of(run) -> dict:
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    return json.loads((run.run_dir / stage["outputs"]["plan"]["path"]).read_text())


def test_if_branches_are_planned_ruled_and_validated_with_the_sample_batch(tmp_path):
    model = if_matmul(width=8)
    onnx.save(model, tmp_path / "if.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds_for(model, sizes={"batch": 6}))
    common = (f"model.path={tmp_path / 'if.onnx'}", f"data.path={tmp_path / 'feeds.npz'}", STAGES)
    run = run_trtpipe(tmp_path, *common,
                      "+precision.rules.then_fp32={match:regex,pattern:'branch/then_branch/.*',precision:fp32}")
    assert run.code == 0, run.stdout + run.stderr
    plan = plan_of(run)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert plan["rules"]["then_fp32"] == ["branch/then_branch/mm", "branch/then_branch/act"]
    assert nodes["branch/then_branch/mm"]["precision"] == "fp32"
    assert nodes["branch/else_branch/mm"]["precision"] == "fp16"
    assert nodes["branch"]["precision"] == "mixed"
    # batch 6 from the sample data (not 1); the sample takes the then-branch, which the rule keeps FP32.
    pre, then_mm = 2 * 6 * 8 * 8, 2 * 6 * 4 * 8
    assert plan["totals"]["flops"]["total"] == pre + then_mm
    assert plan["totals"]["flops"]["low_precision"] == pre
    assert run.statuses()["validate"] == "ran"

    unmatched = run_trtpipe(tmp_path, *common, "+precision.rules.bare={match:exact,pattern:mm,precision:fp32}",
                            run_name="bare")
    assert unmatched.code == 2
    assert "branch/else_branch/mm" in unmatched.stderr


def test_a_loop_decoder_casts_its_invariants_once_and_the_plan_counts_casts_per_step(tmp_path):
    """Issue 21 item 6 from the command line: the encoder kept FP32 by a rule, the Loop body FP16."""
    from tests.precision.loop_invariant_graphs import loop_decoder

    model = loop_decoder()
    onnx.save(model, tmp_path / "decoder.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds_for(model, seed=4))
    run = run_trtpipe(tmp_path, f"model.path={tmp_path / 'decoder.onnx'}", f"data.path={tmp_path / 'feeds.npz'}",
                      STAGES, "+precision.rules.encoder={match:regex,pattern:'encoder/.*',precision:fp32}")
    assert run.code == 0, run.stdout + run.stderr
    plan = plan_of(run)
    # sanitize folds Transpose(Wo) into a weight, stored in FP16 too: the feature map's is the one Cast.
    assert plan["totals"]["casts"] == {"once": 1, "per_step": {"decoder": 3}}
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    written = onnx.load(str(run.run_dir / stage["outputs"]["model"]["path"]))
    assert {n.input[0] for n in written.graph.node if n.op_type == "Cast"} == {"memory"}
    assert run.statuses()["validate"] == "ran" and run.code == 0
