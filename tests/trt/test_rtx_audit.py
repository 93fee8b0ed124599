"""The TensorRT-RTX audit (trtpipe/trt/rtx/audit.py) and the oracle's comparison
(trtpipe/trt/rtx/plan_compare.py) on recorded parser logs (issue 32, items 15-17).

tests/trt/data/rtx_if/ holds two runs of tests/trt/if_models.py's If model through trtpipe and
the real TensorRT-RTX 1.7.1 parser: `fp32_matmul` (the then-branch MatMul kept FP32) and
`all_fp16`; each with precision/model.onnx, precision_plan.json and the parser's per-node lines
of its build log, as logged (ORT's prefix and colour codes included). A plan read against the
other run's model and log is the mutation: the model changed without updating the plan.
"""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.trt.if_models import THEN_MATMUL
from trtpipe.stages.build_rtx import _verdict
from trtpipe.trt.rtx import parser_log, plan_compare
from trtpipe.trt.rtx.audit import audit_table, parser_audit

DATA = Path(__file__).parent / "data" / "rtx_if"


def _audit(plan_run: str, model_run: str, log_text: str | None = None) -> dict:
    plan = json.loads((DATA / plan_run / "precision_plan.json").read_text())
    model = onnx.load(str(DATA / model_run / "model.onnx"), load_external_data=False)
    log = parser_log.read(log_text if log_text is not None else (DATA / model_run / "parser.log").read_text())
    return parser_audit(plan, model, log, {})


def _compare(plan_run: str, model_run: str, log_text: str | None = None) -> plan_compare.Comparison:
    log = parser_log.read(log_text if log_text is not None else (DATA / model_run / "parser.log").read_text())
    return plan_compare.compare(DATA / plan_run / "precision_plan.json", DATA / model_run / "model.onnx", log)


@pytest.mark.parametrize("run", ["fp32_matmul", "all_fp16"])
def test_every_plan_node_bodies_included_is_audited_and_as_planned(run):
    document = _audit(run, run)
    plan = json.loads((DATA / run / "precision_plan.json").read_text())
    assert [row["node"] for row in document["rows"]] == [n["name"] for n in plan["nodes"]]
    assert {row["verdict"] for row in document["rows"]} == {"ok"}, document["rows"]
    assert document["totals"]["in_bodies"] == 6 and document["totals"]["audited"] == 10
    body = next(row for row in document["rows"] if row["node"] == THEN_MATMUL)
    assert body["graph"] == "if.then_branch" and body["outputs"] and body["inputs"]
    assert "error" not in document and document["violations"] == []
    comparison = _compare(run, run)
    assert (comparison.planned, comparison.as_planned, comparison.in_bodies) == (10, 10, 6)


def test_a_body_node_planned_fp32_that_the_model_computes_in_fp16_is_a_violation():
    """The plan keeps the then-branch MatMul FP32; the model (and what the parser logged) is the
    all-FP16 run's. Before issue 32 the audit called it `absent` and reported 0 violations."""
    document = _audit("fp32_matmul", "all_fp16")
    assert document["violations"] == [THEN_MATMUL]
    row = next(r for r in document["rows"] if r["node"] == THEN_MATMUL)
    assert row["verdict"] == "violation" and "parsed HALF, expected FLOAT" in row["evidence"]
    assert "1 violation" in audit_table(document)
    comparison = _compare("fp32_matmul", "all_fp16")
    assert [d.split(" [")[0] for d in comparison.disagreements] == [THEN_MATMUL]


def test_a_planned_fp16_matmul_built_fp32_is_a_finding_of_its_own_kind():
    document = _audit("all_fp16", "fp32_matmul")
    assert document["violations"] == [] and document["findings"]["widened"] == [THEN_MATMUL]
    row = next(r for r in document["rows"] if r["node"] == THEN_MATMUL)
    assert row["verdict"] == "widened" and {t for _, t in row["outputs"]} == {"FLOAT"}
    table = audit_table(document)
    assert "1 widened" in table and "runs FP32: slower" in table
    outcome = _verdict(document, parser_log.read(""), {"audit": "warn"}, "sm89", {"tensorrt_rtx": "1.7.1", "ep": "0.5.0"})
    assert outcome.failed is None and "1 widened" in outcome.summary
    assert [d.split(" [")[0] for d in _compare("all_fp16", "fp32_matmul").disagreements] == [THEN_MATMUL]


def test_a_log_without_per_node_lines_is_an_error_not_zero_violations():
    text = (DATA / "all_fp16" / "parser.log").read_text()
    kept = "\n".join(ln for ln in text.splitlines() if "] inputs: " not in ln and "] outputs: " not in ln)
    document = _audit("all_fp16", "all_fp16", kept)
    assert "no per-node line" in document["error"] and document["totals"].get("ok", 0) == 0
    assert document["findings"]["absent"] and "error: " in audit_table(document)
    for audit in ("warn", "error"):
        outcome = _verdict(document, parser_log.read(kept), {"audit": audit}, "sm89",
                           {"tensorrt_rtx": "1.7.1", "ep": "0.5.0"})
        assert outcome.failed and "no per-node line" in outcome.failed
    assert _compare("all_fp16", "all_fp16", kept).no_node_lines


def test_a_plan_node_the_parser_did_not_log_is_absent_and_fails_build_audit_error():
    text = (DATA / "all_fp16" / "parser.log").read_text()
    kept = "\n".join(ln for ln in text.splitlines() if "if/else_branch/else_act [" not in ln)
    document = _audit("all_fp16", "all_fp16", kept)
    assert document["findings"]["absent"] == ["if/else_branch/else_act"]
    facts = {"tensorrt_rtx": "1.7.1", "ep": "0.5.0"}
    assert _verdict(document, parser_log.read(kept), {"audit": "warn"}, "sm89", facts).failed is None
    failed = _verdict(document, parser_log.read(kept), {"audit": "error"}, "sm89", facts).failed
    assert "1 absent node(s)" in failed and "if/else_branch/else_act" in failed
    assert any("not in the parser's log" in d for d in _compare("all_fp16", "all_fp16", kept).disagreements)


def test_the_last_parse_of_a_node_is_the_one_kept():
    """The EP parses an If body alone before the whole model: the whole model's parse, last, is
    the network the builder got."""
    stamp = "2026-11-28 03:33:13.5 [W:onnxruntime:, tensorrt_rtx_execution_provider.h:214 log] [2026-11-28 03:33:13 UNKNOWN] "
    log = parser_log.read("\n".join([
        stamp + "b/relu [Relu] inputs: [t -> (4)[FLOAT]], ",
        stamp + "b/relu [Relu] outputs: [u -> (4)[FLOAT]], ",
        stamp + "b/relu [Relu] inputs: [t -> (4)[HALF]], ",
        stamp + "b/relu [Relu] outputs: [u -> (4)[HALF]], "]))
    assert log.nodes["b/relu"].inputs == [("t", "HALF")] and log.nodes["b/relu"].outputs == [("u", "HALF")]


def test_an_authored_cast_the_plan_records_as_removed_is_no_finding_and_an_unrecorded_one_is_absent():
    """The precision stage removes redundant authored Casts and records them (redundant_casts.py's
    record_removals): listed in `nodes`, absent from the model by design. Without that record a
    plan node missing from the model is `absent`, and the oracle counts it as not as planned."""
    plan = json.loads((DATA / "all_fp16" / "precision_plan.json").read_text())
    plan["nodes"].append({"name": "x/authored_cast", "op_type": "Cast", "precision": "keep",
                          "reason": "Cast: removed (a Cast to the type its input has)"})
    model = onnx.load(str(DATA / "all_fp16" / "model.onnx"), load_external_data=False)
    log = parser_log.read((DATA / "all_fp16" / "parser.log").read_text())
    unrecorded = parser_audit(plan, model, log, {})
    assert unrecorded["findings"]["absent"] == ["x/authored_cast"]
    plan["redundant_casts"] = {"count": 1, "authored": 1, "casts": [
        {"name": "x/authored_cast", "graph": "g", "reason": "a Cast to the type its input has", "authored": True}]}
    recorded = parser_audit(plan, model, log, {})
    assert not any(recorded["findings"].values()) and recorded["totals"]["removed"] == 1
    assert recorded["rows"][-1]["verdict"] == "removed"
