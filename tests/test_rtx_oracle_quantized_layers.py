"""Engines that stay quantized (issue 31 item 3): the real TensorRT-RTX 1.7.1 builder (bench/rtx's
oracle, so `pytest -n 0 -m rtx`; it FAILS with the reason when the sandbox or the wheel is missing, as
tests/test_rtx_oracle.py says) builds ONNX Runtime's `quantize_static` QDQ model of a small CNN and
trtpipe's output of it (the default recipe), and bench/rtx/quantized_layers.py compares the linear
ops of the two engines' Myelin programs (trtpipe/trt/rtx/engine_program.py).

Measured here: with FP32 biases (`QuantizeBias=False`) the source's engine runs both convs and the FC
INT8xINT8, and so does trtpipe's; with ONNX Runtime's INT32 bias DQs the source's engine runs them
FP32 (the builder lowered the Q/DQ) while trtpipe's (bias DQs folded by sanitize) runs them INT8.
The check can fail: the unquantized model's engine, read as if it were trtpipe's output, loses every
quantized layer, and its convs, planned FP16, run FP32.
"""
from __future__ import annotations

import os

import pytest

from bench.rtx import check
from bench.rtx.quantized_layers import build_program, compare, plan_of
from tests.cli_helpers import run_trtpipe
from tests.precision.qdq_models import ort_quantized_pair
from tests.test_rtx_oracle import REPO, _require_oracle

pytestmark = [pytest.mark.rtx, pytest.mark.slow]
STAGES = "stages=[sanitize,upgrade_opset,precision]"
LINEAR = ("c1", "c2", "fc")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Per bias form: the source's program, trtpipe's program and plan; plus the float model's program."""
    _require_oracle()
    root = tmp_path_factory.mktemp("quantized_layers")
    oracle = check.prepare(root / "oracle")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    found = {}
    for form, quantize_bias in (("fp32_bias", False), ("int32_bias", True)):
        work = root / form
        work.mkdir()
        float_path, qdq = ort_quantized_pair(work, quantize_bias=quantize_bias)
        run = run_trtpipe(work, f"model.path={qdq}", STAGES, env=env)
        assert run.code == 0, run.stdout + run.stderr
        found[form] = (build_program(qdq, work / "source_ctx.onnx", oracle),
                       build_program(run.run_dir / "precision" / "model.onnx", work / "output_ctx.onnx", oracle),
                       plan_of(run.run_dir))
    found["float"] = build_program(float_path, root / "float_ctx.onnx", oracle)
    return found


def test_every_layer_quantized_in_the_source_engine_stays_quantized(built):
    source, output, plan = built["fp32_bias"]
    layers = compare(source, output, plan)
    assert layers.ok, layers.line()
    assert layers.source_quantized == LINEAR and layers.output_quantized == LINEAR, layers.line()
    assert {op.name: op.types for op in output.linear} == dict.fromkeys(LINEAR, "int8xint8")


def test_folded_bias_dequantize_gives_back_the_int8_the_source_engine_lost(built):
    source, output, plan = built["int32_bias"]
    layers = compare(source, output, plan)
    assert layers.ok, layers.line()
    assert layers.source_quantized == () and layers.source_linear == 2, layers.line()  # c1, c2 float; fc fused
    assert layers.output_quantized == LINEAR, layers.line()


def test_the_check_names_lost_layers_and_fp16_ops_run_fp32(built):
    source, _, plan = built["fp32_bias"]
    layers = compare(source, built["float"], plan)
    assert not layers.ok
    assert [entry.split(" ")[0] for entry in layers.lost] == list(LINEAR), layers.line()
    assert "c1 (int8xint8 -> floatxfloat)" in layers.lost
    assert {"c1 [corrltn]: operands floatxfloat", "c2 [corrltn]: operands floatxfloat"} <= set(layers.fell_back)
