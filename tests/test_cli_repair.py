"""Issue 30, item 1, through the command line: a failing plan is repaired, a passing one is untouched.

- `+recipe=naive_fp16` with the repair turned on (naive_fp16 has no protective rule at all, so
  the repair alone must find the plan): exit 0 where the run without it exits 1, the stage line
  says what the repair did, every repaired node has source and reason `repair`, and a rerun is
  `cached` without a single trial;
- the default transformer recipe passes as decided: its plan and model are byte for byte those of
  `precision.repair=false`, and the plan has no `repair` record;
- `precision.repair` is checked at compose time: one line, exit 2, nothing run.
"""

from __future__ import annotations

import hashlib
import json

from tests.cli_helpers import run_trtpipe

TO_VALIDATE = "stages=[sanitize,upgrade_opset,precision,validate]"


def _plan(run) -> dict:
    return json.loads((run.run_dir / "precision" / "precision_plan.json").read_text())


def _digest(run, name: str) -> str:
    return hashlib.sha256((run.run_dir / "precision" / name).read_bytes()).hexdigest()


def test_naive_fp16_with_the_repair_passes_and_says_what_it_did(tmp_path):
    without = run_trtpipe(tmp_path, "+recipe=naive_fp16", TO_VALIDATE, run_name="without")
    assert without.code == 1, without.stdout + without.stderr
    repaired = run_trtpipe(tmp_path, "+recipe=naive_fp16", TO_VALIDATE, "precision.repair.enabled=true",
                           run_name="repaired")
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    line = next(text for text in repaired.stdout.splitlines() if text.lstrip().startswith("precision ") and " ran " in text)
    assert "repaired: +" in line and "FP32 nodes (reason 'repair' in the plan), FLOPs 100.0% -> 100.0%" in line
    assert "repair trial 1/40 (automatic plan)" in repaired.stdout
    plan = _plan(repaired)
    nodes = [node for node in plan["nodes"] if node["source"] == "repair"]
    assert nodes and [node["name"] for node in nodes] == plan["repair"]["added_fp32"]
    assert all(node["precision"] == "fp32" and node["reason"].startswith("repair: kept FP32") for node in nodes)
    assert plan["repair"]["repaired"] and not plan["repair"]["before"]["passed"] and plan["repair"]["after"]["passed"]
    assert f"+{len(nodes)} FP32 nodes" in line
    report = json.loads((repaired.run_dir / "validate" / "validation.json").read_text())
    assert report["passed"]
    again = run_trtpipe(tmp_path, "+recipe=naive_fp16", TO_VALIDATE, "precision.repair.enabled=true",
                        run_name="again")
    assert again.code == 0 and again.statuses()["precision"] == "cached"
    assert "repair trial" not in again.stdout


def test_a_plan_that_passes_is_written_byte_for_byte_as_without_the_repair(tmp_path):
    on = run_trtpipe(tmp_path, "+recipe=transformer_fp16", TO_VALIDATE, run_name="on")
    off = run_trtpipe(tmp_path, "+recipe=transformer_fp16", TO_VALIDATE, "precision.repair=false", run_name="off")
    assert on.code == 0 and off.code == 0, on.stdout + off.stdout
    assert "repair" not in _plan(on)
    for name in ("model.onnx", "precision_plan.json"):
        assert _digest(on, name) == _digest(off, name)
    assert "repair" not in next(t for t in on.stdout.splitlines() if t.lstrip().startswith("precision ") and " ran " in t)


def test_a_wrong_repair_setting_is_one_line_and_exit_2(tmp_path):
    for override, problem in (("precision.repair=sometimes", "precision.repair is 'sometimes'"),
                              ("precision.repair.max_trials=1", "precision.repair.max_trials is 1")):
        run = run_trtpipe(tmp_path, "stages=[sanitize]", override, run_name=override.split("=")[1])
        assert run.code == 2, run.stdout + run.stderr
        assert problem in run.stderr and "Fix:" in run.stderr and "Traceback" not in run.stderr
        assert not run.run_dir.exists() or not (run.run_dir / "sanitize").exists()
