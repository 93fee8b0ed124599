"""Q/DQ as plan entries, from the command line (issue 31, item 1), on a ResNet quantized by ONNX Runtime.

With the default config a Q/DQ model is raised to opset 19 (the stage line says why), where scales
carry the type: the FP32-bias form (ModelOpt's, and ONNX Runtime's once sanitize folded its INT32
bias DQs) gets no Cast next to any Q/DQ; INT32 bias DQs kept (`sanitize.fold_bias_dequantize=false`),
whose scales FP16 would make subnormal, stay FP32 and each costs one Cast, named `subnormal scale`. A pinned opset 17 is respected and the plan says what the model does there (a
DQ outputs FP32). Everywhere the plan and the written model agree on every Q/DQ's float type, and
no scale is stored in FP16 below FP16's normal range. Before: opset 17, 48 and 56 Casts next to
Q/DQ, all `other`, and the plan said `fp16` for every DQ the model wrote FP32 (`none` for every Q).
"""

from __future__ import annotations

import json
import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.precision.resnet_qdq import ort_int8_resnet

FP16_MIN_NORMAL = 2.0**-14
QDQ = ("QuantizeLinear", "DequantizeLinear")
PRECISION = {TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
# name -> (model, overrides)
# Four pipeline runs share one module fixture (about 40 s on 2 cores): slow tier.
pytestmark = pytest.mark.slow
# ONNX Runtime's Q/DQ nodes: 21 Q, 29 DQ (weights and activations), + 8 INT32 bias DQs.
# ONNX Runtime's model as a user has it: sanitize folds its INT32 bias DQs (sanitize.fold_bias_dequantize),
# which leaves it in ModelOpt's form. The runs whose subject is the INT32 bias DQ itself turn the fold off.
KEEP_BIAS_DQ = "sanitize.fold_bias_dequantize=false"
RUNS = {"fp32_bias": ("fp32_bias", ()), "int32_bias_folded": ("int32_bias", ()),
        "int32_bias": ("int32_bias", (KEEP_BIAS_DQ,)),
        "int32_bias_at_17": ("int32_bias", (KEEP_BIAS_DQ, "upgrade_opset.target=17"))}
MODEL_QDQ = {"fp32_bias": 50, "int32_bias_folded": 50, "int32_bias": 58, "int32_bias_at_17": 58}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("qdq_plan")
    onnx.save(ort_int8_resnet(fp32_bias=True), str(workdir / "fp32_bias.onnx"))
    onnx.save(ort_int8_resnet(), str(workdir / "int32_bias.onnx"))
    done = {}
    for name, (model, overrides) in RUNS.items():
        run = run_trtpipe(workdir, f"model.path={workdir / model}.onnx", *overrides, run_name=name)
        assert run.code == 0, run.stdout + run.stderr
        done[name] = run
    return done


def _artifact(run, stage: str, output: str):
    stages = {s["name"]: s for s in run.manifest["stages"]}
    return run.run_dir / stages[stage]["outputs"][output]["path"]


def _plan(run) -> dict:
    return json.loads(_artifact(run, "precision", "plan").read_text())


def _written(run) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(onnx.load(str(_artifact(run, "precision", "model"))))


def _casts_next_to_qdq(model: onnx.ModelProto) -> list[str]:
    """The Casts that read a Q/DQ's output or feed a Q/DQ's input."""
    producer = {t: n for n in model.graph.node for t in n.output}
    read_by: dict[str, list[str]] = {}
    for node in model.graph.node:
        for tensor in node.input:
            read_by.setdefault(tensor, []).append(node.op_type)
    return [node.name for node in model.graph.node if node.op_type == "Cast" and (
        getattr(producer.get(node.input[0]), "op_type", None) in QDQ
        or any(op in QDQ for op in read_by.get(node.output[0], ())))]


def test_a_qdq_model_is_raised_to_opset_19_unless_pinned(runs):
    raised = runs["fp32_bias"]
    assert "opset 17 -> 19" in raised.stdout and "raised to 19: the model holds QuantizeLinear" in raised.stdout
    assert _written(raised).opset_import[0].version == 19
    pinned = runs["int32_bias_at_17"]
    assert "opset 17 -> 17" in pinned.stdout and "raised to" not in pinned.stdout
    assert _written(pinned).opset_import[0].version == 17


@pytest.mark.parametrize("name", ["fp32_bias", "int32_bias_folded"])
def test_no_cast_next_to_qdq_at_opset_19(runs, name):
    run = runs[name]
    written = _written(run)
    assert sum(n.op_type in QDQ for n in written.graph.node) == MODEL_QDQ[name]
    assert _casts_next_to_qdq(written) == []
    assert _plan(run)["totals"]["casts_by_reason"] == {}
    assert "DequantizeLinear planned" not in run.stdout + run.stderr


@pytest.mark.parametrize("name, expected", [("int32_bias", "subnormal scale"), ("int32_bias_at_17", "opset < 19")])
def test_every_remaining_cast_next_to_qdq_has_a_named_reason(runs, name, expected):
    run = runs[name]
    casts = _casts_next_to_qdq(_written(run))
    assert casts
    assert _plan(run)["totals"]["casts_by_reason"] == {expected: len(casts)}


@pytest.mark.parametrize("name", list(RUNS))
def test_the_plan_and_the_model_agree_on_every_qdq_type(runs, name):
    run = runs[name]
    written = _written(run)
    types = {v.name: v.type.tensor_type.elem_type for v in [*written.graph.input, *written.graph.value_info,
                                                            *written.graph.output]}
    types.update({t.name: t.data_type for t in written.graph.initializer})
    planned = {n["name"]: n["precision"] for n in _plan(run)["nodes"]}
    # A DQ's precision is its output type; a Q's is its input type (the float side of each).
    found = {n.name: (planned[n.name], PRECISION.get(types.get(n.output[0] if n.op_type == "DequantizeLinear"
                                                                 else n.input[0])))
             for n in written.graph.node if n.op_type in QDQ}
    assert len(found) == MODEL_QDQ[name]
    assert {name: pair for name, pair in found.items() if pair[0] != pair[1]} == {}


@pytest.mark.parametrize("name", ["int32_bias", "int32_bias_at_17"])
def test_no_fp16_scale_below_the_normal_range(runs, name):
    written = onnx.load(str(_artifact(runs[name], "precision", "model")))
    scales = {t.name: t for t in written.graph.initializer}
    fp16 = [scales[n.input[1]] for n in written.graph.node if n.op_type in QDQ
            and scales[n.input[1]].data_type == TensorProto.FLOAT16]
    # The INT32 bias scales below 2^-14 (7 of 8 here) stay FP32; at 19 most other scales are FP16.
    bias_scales = [scales[n.input[1]] for n in written.graph.node if n.op_type == "DequantizeLinear"
                   and n.input[0] in scales and scales[n.input[0]].data_type == TensorProto.INT32]
    assert len(bias_scales) == 8 and any(t.data_type == TensorProto.FLOAT for t in bias_scales)
    assert len(fp16) > (20 if name == "int32_bias" else -1)
    for scale in fp16:
        values = np.abs(numpy_helper.to_array(scale).astype(np.float64))
        assert not ((values > 0) & (values < FP16_MIN_NORMAL)).any(), scale.name
