"""The plan's FP16/BF16 nodes against the TensorRT ONNX parser's type list, before any GPU."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.trt.fake_tensorrt import FakeTensorRTBackend
from tests.trt.test_build_stage import config, mk
from trtpipe.config.locate import conf_dir
from trtpipe.config.preflight import compose_checked
from trtpipe.config.store import register_configs
from trtpipe.stages.build import BuildEngine
from trtpipe.trt.parser.parser_ops import list_for
from trtpipe.trt.parser.plan_types import pin_rule, plan_precision_findings

NODES = {"/warp/GridSample": "GridSample", "/head/MatMul": "MatMul", "/head/Mish": "Mish"}


def write(directory, precisions: dict[str, str]):
    """x -> GridSample -> MatMul -> Mish -> y, and a plan giving each node `precisions[name]`."""
    directory.mkdir(parents=True, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 8, 8, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["s"], "/warp/GridSample"),
             helper.make_node("MatMul", ["s", "w"], ["m"], "/head/MatMul"),
             helper.make_node("Mish", ["m"], ["y"], "/head/Mish")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, grid], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(directory / "model.onnx"))
    plan = {"nodes": [{"name": n, "op_type": op, "precision": precisions[n]} for n, op in NODES.items()]}
    (directory / "precision_plan.json").write_text(json.dumps(plan))
    return {"model": directory / "model.onnx", "plan": directory / "precision_plan.json"}


def test_bf16_gridsample_and_mish_are_reported_fp16_ones_are_not():
    table = list_for("10.16", "test")
    bf16 = {"nodes": [{"name": n, "op_type": op, "precision": "bf16"} for n, op in NODES.items()]}
    findings = plan_precision_findings(bf16, table)
    assert [(f["op_type"], f["planned"], f["nodes"]) for f in findings] == \
        [("GridSample", "bf16", ["/warp/GridSample"]), ("Mish", "bf16", ["/head/Mish"])]
    assert "BF16" not in findings[0]["parser_types"] and "FP16" in findings[0]["parser_types"]
    fp16 = {"nodes": [{**n, "precision": "fp16"} for n in bf16["nodes"]]}
    assert plan_precision_findings(fp16, table) == []
    kept = {"nodes": [{**n, "precision": "keep"} for n in bf16["nodes"]]}
    assert plan_precision_findings(kept, table) == []


def test_the_build_stage_records_it_in_parser_support_json_and_warns(tmp_path, caplog):
    inputs = write(tmp_path / "in", {"/warp/GridSample": "bf16", "/head/MatMul": "bf16", "/head/Mish": "fp32"})
    backend = FakeTensorRTBackend(available=False)
    with caplog.at_level(logging.WARNING):
        BuildEngine(backend=backend).run(inputs, config(tmp_path, tensorrt_version="10.16"), mk(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "parser_support.json").read_text())
    assert [(f["op_type"], f["planned"], f["count"]) for f in report["plan_precision"]] == [("GridSample", "bf16", 1)]
    assert pin_rule("GridSample") in caplog.text


def test_the_printed_rule_is_a_valid_override():
    register_configs()
    import shlex
    import subprocess

    words = shlex.split(pin_rule("GridSample"))  # what a shell hands trtpipe when the rule is pasted
    assert len(words) == 1
    echoed = subprocess.run(["bash", "-c", f"printf '%s\\n' {pin_rule('GridSample')}"], capture_output=True, text=True)
    assert echoed.stdout.splitlines() == words  # bash too: no brace expansion
    cfg = compose_checked(conf_dir(), ["+recipe=transformer_fp16", words[0]])
    rule = cfg.precision.rules["keep_gridsample"]
    assert (rule.match, rule.pattern, rule.precision) == ("op_type", "GridSample", "fp32")


def _plan(*pairs):
    return {"nodes": [{"name": f"/n{i}", "op_type": op, "precision": p} for i, (op, p) in enumerate(pairs)]}


def test_on_tensorrt_11_the_real_parsers_measured_verdicts_correct_the_documented_list():
    """Issue 23 item 2, measured by `python -m bench.rtx --ops` (TensorRT-RTX 1.7.1, single-op models,
    trtpipe/trt/parser/onnx_parser_ops_measured/tensorrt_rtx-1.7.1.json): the 11.1 list gives GridSample
    and NonZero FP32/FP16 only, yet the real parser built both in BF16 (Mish too is listed FP32/FP16, and
    the real parser refused BF16 Mish: the finding stays); it gives ConvTranspose BF16, yet the real
    builder refused a BF16 ConvTranspose whose FP32 twin built."""
    from trtpipe.trt.parser import measured
    from trtpipe.trt.parser.plan_types import measured_overrides

    table = list_for("11.1", "test")
    assert "BF16" not in table.ops["GridSample"]["types"] and "BF16" in table.ops["ConvTranspose"]["types"]
    assert measured.built("GridSample", "BF16") and measured.built("NonZero", "BF16")
    assert not measured.built("Mish", "BF16")
    assert measured.type_refusal("ConvTranspose", "BF16") and measured.type_refusal("ConvTranspose", "FP16") is None
    plan = _plan(("GridSample", "bf16"), ("NonZero", "bf16"), ("Mish", "bf16"), ("ConvTranspose", "bf16"),
                 ("ConvTranspose", "fp16"))
    findings = plan_precision_findings(plan, table)
    assert [(f["op_type"], f["planned"], f["evidence"]) for f in findings] == \
        [("ConvTranspose", "bf16", "measured"), ("Mish", "bf16", "documented")]
    assert "TensorRT-RTX 1.7.1" in findings[0]["reason"] and "FP32 twin built" in findings[0]["reason"]
    assert [(f["op_type"], f["planned"]) for f in measured_overrides(plan, table)] == \
        [("GridSample", "bf16"), ("NonZero", "bf16")]


def test_on_tensorrt_10_the_documented_list_stays_the_evidence():
    from trtpipe.trt.parser.plan_types import measured_overrides

    table = list_for("10.16", "test")
    plan = _plan(("GridSample", "bf16"), ("ConvTranspose", "bf16"))
    assert [(f["op_type"], f["evidence"]) for f in plan_precision_findings(plan, table)] == [("GridSample", "documented")]
    assert measured_overrides(plan, table) == []
