"""A T5 v1.1 encoder as Hugging Face transformers exports it (issue 21, item 2): the builder writes
the exporter's graph, and `transformer_fp16` keeps FP32 only what needs it.

Measured on a real `torch.onnx.export` (TorchScript) of `T5EncoderModel(T5Config(
feed_forward_proj="gated-gelu", d_model=256, d_ff=640, 4 layers))`, transformers 5.24, torch 2.13,
weights scaled as `hf_t5_export.Scales` scales them, and on this builder's model (same figures):
- before: 104 FP32 nodes, 18 Casts, 78.7% of the MatMul FLOPs FP16, rel_l2 0.0013: the range rule
  kept the FFN output MatMul (`wo`, 4.3e3-4.8e3) FP32 in every block, and the tanh GELU's
  Pow/Mul/Add/Mul (x^3 up to 1.7e5, where the Tanh is saturated);
- after (heavy_max_abs, saturating_chains.py): 64 FP32 nodes, 14 Casts, 100%, rel_l2 0.0016;
- the search (`transformer_fp16_search`): 31 FP32 nodes, 13 Casts, 100%, rel_l2 0.0019.
The builder needs no torch (CI has none).
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cli_helpers import run_trtpipe
from tests.models.hf_t5_export import (INPUT_SPECS, SEQUENCE, Scales, T5Shape, build_hf_t5, calibrated, forward,
                                       hf_init)
from trtpipe.models._builders import seeded_rng

SHAPE = T5Shape()


@lru_cache(maxsize=None)
def _model_bytes() -> bytes:
    return build_hf_t5().SerializeToString()


def _model() -> onnx.ModelProto:
    return onnx.load_from_string(_model_bytes())


def _weights():
    rng = seeded_rng(2121)  # build_hf_t5's default seed: the same draws in the same order
    weights = hf_init(SHAPE, rng)
    return calibrated(weights, Scales(), rng, rng.randint(0, SHAPE.vocab, (4, SEQUENCE)))


def test_the_graph_is_the_torchscript_export_s():
    model = _model()
    onnx.checker.check_model(model, full_check=True)
    nodes = {node.name: node for node in model.graph.node}
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node.name)
    ops = [node.op_type for node in model.graph.node]
    layers = SHAPE.layers
    assert ops.count("MatMul") == 9 * layers  # q, k, v, o, scores, context, wi_0, wi_1, wo
    assert ops.count("Tanh") == layers and ops.count("Softmax") == layers and ops.count("Log") == 1
    assert ops.count("Pow") == (2 * layers + 1) + layers  # every RMSNorm's x^2, every GELU's x^3
    assert ops.count("Sqrt") == 2 * layers + 1 and ops.count("Range") == 2
    for i in range(layers):
        for j in (0, 1):
            # The no-op `.to(float32)` is the residual stream's producer for the Add after the sublayer.
            cast = nodes[f"/encoder/block.{i}/layer.{j}/layer_norm/Cast"]
            assert cast.op_type == "Cast" and cast.attribute[0].i == onnx.TensorProto.FLOAT
            assert sorted(readers[cast.output[0]]) == sorted([
                f"/encoder/block.{i}/layer.{j}/layer_norm/Pow", f"/encoder/block.{i}/layer.{j}/layer_norm/Mul",
                f"/encoder/block.{i}/layer.{j}/Add"])
        act = f"/encoder/block.{i}/layer.1/DenseReluDense/act"
        assert [nodes[f"{act}/{op}"].op_type for op in ("Pow", "Tanh", "Mul_3")] == ["Pow", "Tanh", "Mul"]
        wo = nodes[f"/encoder/block.{i}/layer.1/DenseReluDense/wo/MatMul"]
        assert wo.input[1].startswith("onnx::MatMul_")
    # The masked position bias is computed once, in the first block, and read by every block's scores.
    bias = nodes["/encoder/block.0/layer.0/SelfAttention/Where_1"].output[0]
    # (the first block's is `Add_3`, after the bucket arithmetic's Adds, as the exporter numbers it)
    assert sorted(readers[bias]) == sorted(["/encoder/block.0/layer.0/SelfAttention/Add_3"] + [
        f"/encoder/block.{i}/layer.0/SelfAttention/Add" for i in range(1, layers)])


def test_onnx_runtime_computes_the_numpy_encoder_and_the_stream_reaches_1e4():
    weights = _weights()
    ids = np.random.RandomState(0).randint(0, SHAPE.vocab, (1, SEQUENCE))
    session = ort.InferenceSession(_model_bytes(), providers=["CPUExecutionProvider"])
    out = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    np.testing.assert_allclose(out, forward(weights, ids), rtol=1e-3, atol=1e-3)
    seen = {}
    forward(weights, ids, lambda name, value: seen.setdefault(name, float(np.abs(value).max())))
    assert 8e3 < seen["encoder.final_layer_norm.weight"] < 2e4  # the residual stream before the final norm
    ffn = [seen[f"encoder.block.{i}.layer.1.DenseReluDense.wo.weight"] for i in range(SHAPE.layers)]
    assert max(ffn) > 4096 and max(ffn) < 16384  # beyond max_abs, with 4x headroom below 65504


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("hf_t5")
    path = workdir / "t5_v1_1_encoder.onnx"
    path.write_bytes(_model_bytes())
    inputs = [f"++data.inputs.{name}={{low:{spec['low']},high:{spec['high']},dtype:int64,shape:[1,{SEQUENCE}]}}"
              for name, spec in INPUT_SPECS.items()]
    profile = ",".join(f"{name}:{{min:[1,1],opt:[1,{SEQUENCE}],max:[1,64]}}" for name in INPUT_SPECS)
    return run_trtpipe(workdir, "+recipe=transformer_fp16", f"model.path={path}", *inputs,
                       f"build.profiles=[{{{profile}}}]")


def test_transformer_fp16_keeps_the_ffn_output_fp16_with_a_margin(recipe_run):
    assert recipe_run.code == 0, recipe_run.stdout + recipe_run.stderr
    plan = json.loads((recipe_run.run_dir / "precision" / "precision_plan.json").read_text())
    assert plan["totals"]["low_precision_flop_share"] >= 0.90
    by_name = {node["name"]: node for node in plan["nodes"]}
    for i in range(SHAPE.layers):
        assert by_name[f"/encoder/block.{i}/layer.1/DenseReluDense/wo/MatMul"]["precision"] == "fp16"
        # The GELU's x^3 (1.3e5-1.7e5) overflows only where its Tanh saturates: FP16 (saturating_chains.py).
        for op in ("Pow", "Mul_1", "Add", "Mul_2"):
            gelu = by_name[f"/encoder/block.{i}/layer.1/DenseReluDense/act/{op}"]
            assert gelu["precision"] == "fp16" and "saturates (saturating_chains.py)" in gelu["reason"]
    # Still protected: every RMSNorm's x^2 (1e8 > 65504) and the residual Adds beyond max_abs.
    assert by_name["/encoder/final_layer_norm/Pow"]["precision"] == "fp32"
    assert by_name["/encoder/block.3/layer.1/Add"]["precision"] == "fp32"
    report = json.loads((recipe_run.run_dir / "validate" / "validation.json").read_text())
    (emulated,) = [c for c in report["candidates"] if c["name"] == "emulated"]
    assert emulated["outputs"]["last_hidden_state"]["rel_l2"] <= 0.01
