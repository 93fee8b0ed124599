"""The op-support check through the real command line: exit 2 with the message, or a warning with `warn`."""

from __future__ import annotations

import json

import onnx

from tests.cli_helpers import run_trtpipe
from tests.trt import parser_models as pm

UP_TO_BUILD = "stages=[sanitize,upgrade_opset,precision,build]"


def test_unsupported_ops_stop_the_run_with_exit_2_naming_ops_nodes_and_the_fix(tmp_path):
    onnx.save(pm.dynamic_quantized_model(), tmp_path / "quantized.onnx")
    run = run_trtpipe(tmp_path, "model.path=quantized.onnx", "build.tensorrt_version='10.16'")
    assert run.code == 2, run.stderr
    assert run.statuses() == {"sanitize": "ran", "upgrade_opset": "ran", "precision": "ran", "build": "failed",
                              "validate": "skipped"}
    (line,) = [line for line in run.stderr.splitlines() if "cannot import" in line]
    assert "TensorRT 10.16's ONNX parser cannot import 2 op(s) of this model" in line
    assert "DynamicQuantizeLinear (1 node: /fc/x_quant)" in line and "MatMulInteger (1 node: /fc/MatMul_quant)" in line
    assert "Fix:" in line and "build.unsupported=warn" in line


def test_warn_continues_and_lists_the_ops_in_the_build_outputs(tmp_path):
    onnx.save(pm.contrib_ops_model(), tmp_path / "contrib.onnx")
    run = run_trtpipe(tmp_path, "model.path=contrib.onnx", UP_TO_BUILD, "build.unsupported=warn")
    assert run.code == 0, run.stderr
    assert run.statuses()["build"] == "deferred"
    assert any("cannot import com.microsoft.FusedMatMul (1 node: /ffn/fused_matmul)" in line and
               "build.unsupported=warn" in line for line in run.stderr.splitlines())
    (build,) = [s for s in run.manifest["stages"] if s["name"] == "build"]
    assert "parser check (TensorRT" in build["summary"] and "com.microsoft.FusedMatMul x1" in build["summary"]
    report = json.loads((run.run_dir / build["outputs"]["parser_support"]["path"]).read_text())
    assert report["mode"] == "warn" and report["errors"] == ["com.microsoft.FusedMatMul"]
    assert report["warnings"] == ["com.microsoft.Gelu"]
