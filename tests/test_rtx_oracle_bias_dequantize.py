"""The real TensorRT-RTX 1.7.1 builder on ONNX Runtime's QDQ format, before and after sanitize folds its
INT32 bias DequantizeLinears (issue 31 item 3; bench/rtx's oracle, so `pytest -m rtx`: it needs a
sandbox that hides the GPU driver (root or a user namespace) and the pinned wheel, and FAILS with the
reason when one is missing, as tests/test_rtx_oracle.py says).

Measured here on a two-Conv + Gemm model quantized by `quantize_static` (symmetric INT8, per channel):
the source model's engine build imports its bias *and weight* DequantizeLinears as FP32 constants
(`__trt_rtx_qdq_lowered_..._folded_constant`, the weight DQs never reach the parser as nodes: the
convs read float weights), while trtpipe's sanitized model is built with no lowered constant and every
weight DequantizeLinear parsed as a node reading INT8 codes.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rtx import check, sandbox
from tests.cli_helpers import run_trtpipe
from tests.precision.qdq_models import ort_quantized_pair
from tests.test_rtx_oracle import REPO, _require_oracle

pytestmark = [pytest.mark.rtx, pytest.mark.slow]
LOWERED = re.compile(r"Importing initializer: (__trt_rtx_qdq_lowered_\w+)")
WEIGHT_DQ = re.compile(r"(\w+_w_DequantizeLinear) \[DequantizeLinear\] inputs: \[\w+ -> \([\d, ]+\)\[INT8\]\]")


def _build_log(model: Path, work: Path, oracle: dict) -> str:
    out = work / f"{model.parent.name}_{model.stem}_ctx.onnx"
    child = [sys.executable, "-m", "bench.rtx.compile_one", str(model), str(out), "--target", "sm89",
             "--standins", str(oracle["standins"]), "--wheel-home", str(oracle["wheel_home"])]
    done = subprocess.run(sandbox.wrap(child, oracle["fake_drm"]), capture_output=True, text=True,
                          env=oracle["env"], timeout=600, cwd=REPO)
    assert '"ok": true' in done.stdout, done.stdout + done.stderr[-2000:]
    return done.stderr


def test_folding_the_bias_dequantize_keeps_every_qdq_for_the_builder(tmp_path):
    _require_oracle()
    _, qdq = ort_quantized_pair(tmp_path)
    run = run_trtpipe(tmp_path, f"model.path={qdq}", "stages=[sanitize]", run_name="sanitized",
                      env={"PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))})
    assert run.code == 0, run.stdout + run.stderr
    oracle = check.prepare(tmp_path / "oracle")
    source = _build_log(qdq, tmp_path, oracle)
    ours = _build_log(run.run_dir / "sanitize" / "model.onnx", tmp_path, oracle)
    lowered = set(LOWERED.findall(source))
    assert {name for name in lowered if name.endswith("_w_DequantizeLinear_Output_folded_constant")}, lowered
    assert set(WEIGHT_DQ.findall(source)) == set()
    assert set(LOWERED.findall(ours)) == set()
    assert set(WEIGHT_DQ.findall(ours)) == {"c1_w_DequantizeLinear", "c2_w_DequantizeLinear", "fc_w_DequantizeLinear"}
