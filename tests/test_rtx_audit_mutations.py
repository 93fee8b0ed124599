"""The TensorRT-RTX audit and oracle on If bodies, with the real parser (issue 32, items 15-17).

tests/trt/if_models.py's If model goes through trtpipe's command line twice (the then-branch
MatMul kept FP32 by a rule, and all FP16); the real TensorRT-RTX 1.7.1 parser and builder
compile it in bench/rtx's sandbox. The mutations put one run's precision/model.onnx under the
other run's plan (the model changed, the plan not): a body node planned FP32 built FP16 is
caught, and so is a planned-FP16 MatMul built FP32. `pytest -m rtx`; what it needs and
writes: tests/test_rtx_oracle.py and CONTRIBUTING.md.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from bench.rtx import check
from tests.test_rtx_oracle import REPO, _require_oracle, _trtpipe
from tests.trt.if_models import THEN_MATMUL, THEN_MATMUL_FP32, if_model
from trtpipe.trt.rtx import parser_log
from trtpipe.trt.rtx.audit import parser_audit

pytestmark = [pytest.mark.rtx, pytest.mark.slow]
PLANS = {"fp32_matmul": (THEN_MATMUL_FP32,), "all_fp16": ()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both runs' precision output (trtpipe's CLI), and the prepared oracle."""
    _require_oracle()
    work = tmp_path_factory.mktemp("rtx-if")
    onnx.save(if_model(), work / "if_model.onnx")
    env = dict(os.environ, TRTPIPE_CACHE=str(work / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    for name, rules in PLANS.items():
        done = subprocess.run([sys.executable, "-m", "trtpipe", f"model.path={work / 'if_model.onnx'}",
                               "stages=[sanitize,upgrade_opset,precision]", *rules, f"hydra.run.dir={work / name}"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    return work, check.prepare(work / "oracle")


def _oracle(runs, plan_of: str, model_of: str, tmp_path: Path) -> tuple[check.ModelResult, dict]:
    """`plan_of`'s plan against `model_of`'s model, compiled by the real EP; and the audit of its log."""
    work, oracle = runs
    run = tmp_path / "run"
    (run / "precision").mkdir(parents=True)
    shutil.copy(work / plan_of / "precision" / "precision_plan.json", run / "precision")
    shutil.copy(work / model_of / "precision" / "model.onnx", run / "precision")
    result = check.compile_and_compare("if_model", run, oracle, "sm89", 300)
    plan = json.loads((run / "precision" / "precision_plan.json").read_text())
    model = onnx.load(str(run / "precision" / "model.onnx"), load_external_data=False)
    return result, parser_audit(plan, model, parser_log.read(Path(result.log_path).read_text()), {})


@pytest.mark.parametrize("name", list(PLANS))
def test_the_oracle_row_counts_body_nodes_and_every_one_is_as_planned(runs, tmp_path, name):
    result, audit = _oracle(runs, name, name, tmp_path)
    assert result.verdict == "built" and result.counts, result.line()
    assert "10/10 node types as planned (6 in If/Loop/Scan bodies)" in result.line(), result.line()
    assert audit["totals"]["in_bodies"] == 6 and audit["totals"]["ok"] == 10, audit["totals"]


def test_a_body_node_planned_fp32_made_fp16_in_the_model_is_caught(runs, tmp_path):
    result, audit = _oracle(runs, "fp32_matmul", "all_fp16", tmp_path)
    assert result.verdict == "built" and not result.counts
    assert [d.split(" [")[0] for d in result.comparison.disagreements] == [THEN_MATMUL]
    assert "9/10 node types as planned" in result.line()
    assert audit["violations"] == [THEN_MATMUL]
    row = next(r for r in audit["rows"] if r["node"] == THEN_MATMUL)
    assert row["graph"] == "if.then_branch" and {t for _, t in row["outputs"]} == {"HALF"}


def test_a_planned_fp16_matmul_built_fp32_is_caught_as_its_own_finding(runs, tmp_path):
    result, audit = _oracle(runs, "all_fp16", "fp32_matmul", tmp_path)
    assert not result.counts and "9/10 node types as planned" in result.line()
    assert audit["violations"] == [] and audit["findings"]["widened"] == [THEN_MATMUL]


def test_a_real_log_without_its_per_node_lines_is_an_error(runs, tmp_path):
    from trtpipe.stages.build_rtx import _verdict

    result, _ = _oracle(runs, "all_fp16", "all_fp16", tmp_path)
    text = "\n".join(ln for ln in Path(result.log_path).read_text().splitlines()
                     if "] inputs: " not in ln and "] outputs: " not in ln)
    log = parser_log.read(text)
    assert log.engine_seconds is not None and not log.nodes   # the rest of the real log is there
    work, _ = runs
    plan = json.loads((work / "all_fp16" / "precision" / "precision_plan.json").read_text())
    model = onnx.load(str(work / "all_fp16" / "precision" / "model.onnx"), load_external_data=False)
    audit = parser_audit(plan, model, log, {})
    assert "no per-node line" in audit["error"] and not audit["violations"]
    outcome = _verdict(audit, log, {"audit": "warn"}, "sm89", {"tensorrt_rtx": "1.7.1", "ep": "0.5.0"})
    assert outcome.failed and "no per-node line" in outcome.failed
    run = Path(result.log_path).parents[1]   # the oracle's row: compared nothing, does not count
    result.comparison = check.plan_compare.compare(run / "precision" / "precision_plan.json",
                                                   run / "precision" / "model.onnx", log)
    assert not result.counts and "no per-node line" in result.line()


def test_trtpipe_s_own_rtx_build_audits_the_body_nodes(runs):
    """`trtpipe ... build.backend=tensorrt_rtx build.audit=error` on the If model in the sandbox:
    every plan node, the six in the branches included, typed as planned."""
    work, oracle = runs
    done = _trtpipe(work, "backend", f"model.path={work / 'if_model.onnx'}", THEN_MATMUL_FP32,
                    "stages=[sanitize,upgrade_opset,precision,build]", "build.backend=tensorrt_rtx",
                    "build.audit=error", sandboxed=True, oracle=oracle)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    audit = json.loads((work / "backend" / "build" / "precision_audit.json").read_text())
    assert audit["totals"]["audited"] == 10 and audit["totals"]["in_bodies"] == 6 and audit["totals"]["ok"] == 10
    row = next(r for r in audit["rows"] if r["node"] == THEN_MATMUL)
    assert row["planned"] == "fp32" and {t for _, t in row["outputs"]} == {"FLOAT"}
    assert "audit: 10 plan nodes (6 in bodies), 10 as planned" in done.stdout + done.stderr
