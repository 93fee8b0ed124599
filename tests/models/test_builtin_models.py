"""The built-in example models: valid, runnable, reproducible, and carrying their failure mode.

The FP16 overflow is shown without FP16 hardware: the FP32 model is run in
ONNX Runtime with the LayerNorm's `Pow` output (the squared deviations that
the variance averages) added as a graph output, and its maximum is compared
with FP16's largest finite value.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

import trtpipe
from trtpipe.errors import UserError
from trtpipe.models import (
    BUILTIN_INPUT_SPECS,
    BUILTIN_MODEL_VERSION,
    BUILTIN_MODELS,
    builtin_model,
)

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
NAMES = ["transformer", "nafnet", "mixed_precision", "t5", "gpt2"]


@pytest.fixture(scope="module")
def models() -> dict[str, onnx.ModelProto]:
    return {name: builtin_model(name) for name in NAMES}


def sample_inputs(model: onnx.ModelProto, name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs drawn from BUILTIN_INPUT_SPECS (`high` exclusive for integers)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for graph_input in model.graph.input:
        spec = BUILTIN_INPUT_SPECS[name][graph_input.name]
        shape = [dim.dim_value for dim in graph_input.type.tensor_type.shape.dim]
        if spec["dtype"] == "int64":
            feeds[graph_input.name] = rng.integers(spec["low"], spec["high"], size=shape, dtype=np.int64)
        else:
            feeds[graph_input.name] = rng.uniform(spec["low"], spec["high"], size=shape).astype(np.float32)
    return feeds


def run(model: onnx.ModelProto, feeds: dict, extra_outputs: list[str] = ()) -> dict[str, np.ndarray]:
    """Run in ONNX Runtime on CPU, optionally exposing intermediate FP32 tensors."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for tensor in extra_outputs:
        model.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def nodes(model: onnx.ModelProto, op_type: str) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.op_type == op_type]


def layer_norm_pows(model: onnx.ModelProto, scope_word: str) -> list[onnx.NodeProto]:
    return [node for node in nodes(model, "Pow") if scope_word in node.name]


# --- the registry -----------------------------------------------------------


def test_registry_names_and_specs_cover_every_input(models):
    assert sorted(BUILTIN_MODELS) == sorted(NAMES)
    assert sorted(BUILTIN_INPUT_SPECS) == sorted(NAMES)
    assert isinstance(BUILTIN_MODEL_VERSION, str) and BUILTIN_MODEL_VERSION
    for name, model in models.items():
        assert sorted(BUILTIN_INPUT_SPECS[name]) == sorted(i.name for i in model.graph.input)
        for graph_input in model.graph.input:
            expected = onnx.helper.tensor_dtype_to_np_dtype(graph_input.type.tensor_type.elem_type)
            assert BUILTIN_INPUT_SPECS[name][graph_input.name]["dtype"] == np.dtype(expected).name


def test_unknown_name_is_a_user_error_listing_the_valid_names():
    with pytest.raises(UserError) as caught:
        builtin_model("resnet")
    assert "resnet" in caught.value.problem
    for name in NAMES:
        assert name in caught.value.fix


# --- every model ------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_passes_the_full_checker_with_fixed_metadata(models, name):
    model = models[name]
    onnx.checker.check_model(model, full_check=True)
    assert model.producer_name == "trtpipe"
    assert model.ir_version == 8
    assert all(node.name for node in model.graph.node)
    assert len({node.name for node in model.graph.node}) == len(model.graph.node)


@pytest.mark.parametrize("name", NAMES)
def test_runs_in_onnx_runtime_with_finite_outputs(models, name):
    outputs = run(models[name], sample_inputs(models[name], name))
    assert outputs
    for output_name, value in outputs.items():
        assert value.dtype == np.float32, output_name
        assert np.isfinite(value).all(), output_name


@pytest.mark.parametrize("name", NAMES)
def test_two_builds_serialise_identically(name):
    assert BUILTIN_MODELS[name]().SerializeToString() == BUILTIN_MODELS[name]().SerializeToString()


def test_builds_are_identical_across_processes(models):
    # The child imports trtpipe from the same checkout, however pytest found it.
    package_root = str(Path(trtpipe.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    script = (
        "import hashlib; from trtpipe.models import builtin_model; "
        f"print(' '.join(hashlib.sha256(builtin_model(n).SerializeToString()).hexdigest() for n in {NAMES!r}))"
    )
    other_process = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    here = [hashlib.sha256(models[name].SerializeToString()).hexdigest() for name in NAMES]
    assert other_process == here


# --- transformer ------------------------------------------------------------


def test_transformer_layer_norm_variance_overflows_fp16_while_fp32_is_finite(models):
    model = models["transformer"]
    pows = layer_norm_pows(model, "LayerNorm")
    assert len(pows) == 5  # embeddings + 2 per encoder layer
    outputs = run(model, sample_inputs(model, "transformer"), [node.output[0] for node in pows])
    squared_deviations = max(float(outputs[node.output[0]].max()) for node in pows)
    assert squared_deviations > FP16_MAX
    hidden = outputs["last_hidden_state"]
    assert hidden.shape == (1, 16, 64)
    assert np.isfinite(hidden).all()
    # The output itself fits FP16: the failure is the variance alone.
    assert np.abs(hidden).max() < FP16_MAX


def test_transformer_has_the_fp32_min_mask_constant(models):
    model = models["transformer"]
    constants = [numpy_helper.to_array(t) for t in model.graph.initializer]
    constants += [numpy_helper.to_array(node.attribute[0].t) for node in nodes(model, "Constant")]
    floats = [value for value in constants if value.dtype == np.float32]
    assert any(np.any(value == np.float32(-3.4028234663852886e38)) for value in floats)


def test_transformer_uses_exporter_style_names(models):
    model = models["transformer"]
    names = {node.name for node in model.graph.node}
    for expected in [
        "/embeddings/LayerNorm/ReduceMean",
        "/encoder/layer.0/attention/self/MatMul",
        "/encoder/layer.0/attention/output/LayerNorm/Pow",
        "/encoder/layer.1/intermediate/intermediate_act_fn/Erf",
    ]:
        assert expected in names
    tensors = {output for node in model.graph.node for output in node.output}
    assert "/encoder/layer.0/attention/self/MatMul_output_0" in tensors
    initializers = {tensor.name for tensor in model.graph.initializer}
    assert "encoder.layer.0.attention.self.query.weight" in initializers
    assert model.opset_import[0].version == 13


# --- nafnet -----------------------------------------------------------------


def test_nafnet_layer_norm_variance_overflows_fp16_while_fp32_is_finite(models):
    model = models["nafnet"]
    pows = layer_norm_pows(model, "/norm")
    assert len(pows) == 4  # norm1 and norm2 of two blocks
    outputs = run(model, sample_inputs(model, "nafnet"), [node.output[0] for node in pows])
    assert max(float(outputs[node.output[0]].max()) for node in pows) > FP16_MAX
    restored = outputs["restored"]
    assert restored.shape == (1, 3, 64, 64)
    assert np.isfinite(restored).all()
    assert -0.5 < restored.min() and restored.max() < 1.5  # an image, not a blown-up tensor


def test_nafnet_structure(models):
    model = models["nafnet"]
    reduce_means = [node for node in nodes(model, "ReduceMean") if "/norm" in node.name]
    assert len(reduce_means) == 8
    for node in reduce_means:
        assert helper.get_attribute_value(node.attribute[0]) == [1]
    (depth_to_space,) = nodes(model, "DepthToSpace")
    modes = [helper.get_attribute_value(a) for a in depth_to_space.attribute if a.name == "mode"]
    assert modes == [b"CRD"]  # how PyTorch exports nn.PixelShuffle
    assert nodes(model, "GlobalAveragePool")
    weights = {tensor.name: tensor for tensor in model.graph.initializer}
    depthwise = []
    for conv in nodes(model, "Conv"):
        group = next(helper.get_attribute_value(a) for a in conv.attribute if a.name == "group")
        out_channels, in_per_group = weights[conv.input[1]].dims[:2]
        if group > 1 and group == out_channels and in_per_group == 1:
            depthwise.append(conv.name)
    assert depthwise
    assert "/encoders.0/encoders.0.0/norm1/Pow" in {node.name for node in model.graph.node}


# --- mixed_precision --------------------------------------------------------


def test_mixed_precision_mixes_fp16_and_fp32_with_casts(models):
    model = models["mixed_precision"]
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    types = {info.type.tensor_type.elem_type for info in inferred.graph.value_info}
    types |= {tensor.data_type for tensor in model.graph.initializer}
    assert TensorProto.FLOAT16 in types and TensorProto.FLOAT in types
    casts = nodes(model, "Cast")
    assert len(casts) >= 3
    targets = {helper.get_attribute_value(cast.attribute[0]) for cast in casts}
    assert targets == {TensorProto.FLOAT16, TensorProto.FLOAT}
