"""fuse_layernorms on the forms tf2onnx, jax2tf, torch and hand-written exports use: structure, numerics, refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.graph import graphs
from tests.graph.layernorm_forms import (FORMS, SHAPE, layernorm_form, offset_input, reference_layernorm,
                                         reference_unbiased_std, unbiased_std_form)
from trtpipe.graph.layernorm.layernorm_fusion import fuse_layernorms
from trtpipe.graph.upgrade import upgrade_model



def _outputs(model, x):
    return graphs.run(model, {"x": x})[0]


@pytest.mark.parametrize(("variance", "normalise"), FORMS)
@pytest.mark.parametrize("opset", [17, 18])
def test_each_form_is_fused_into_one_layernormalization(variance, normalise, opset):
    model = layernorm_form(variance, normalise, opset=opset)
    fused, report = fuse_layernorms(model)

    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "MatMul"]
    (entry,) = report["fused"]
    assert entry["axis"] == -1 and entry["affine"] and report["refused"] == []
    assert len(entry["absorbed"]) == len(model.graph.node) - 1  # everything but the MatMul
    onnx.checker.check_model(fused, full_check=True)
    x = graphs.random_input(SHAPE)
    np.testing.assert_allclose(_outputs(fused, x), _outputs(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("variance", "normalise"), [("centred_mul", "reciprocal"), ("moments_pow", "div"), ("centred_pow", "rsqrt")])
def test_forms_without_gamma_and_beta_get_a_unit_scale(variance, normalise):
    model = layernorm_form(variance, normalise, affine=False)
    fused, report = fuse_layernorms(model)
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "MatMul"]
    assert not report["fused"][0]["affine"]
    x = graphs.random_input(SHAPE)
    np.testing.assert_allclose(_outputs(fused, x), _outputs(model, x), rtol=1e-5, atol=1e-5)


def test_fused_moment_difference_is_more_accurate_than_the_decomposed_form():
    # Same math without the cancellation: closer to the float64 LayerNorm, never further.
    model = layernorm_form("moments_mul", "div")
    fused, _ = fuse_layernorms(model)
    x = offset_input(mean=3000.0, spread=0.5)
    want = reference_layernorm(model, x)
    fused_error = np.abs(_outputs(fused, x) - want).max()
    decomposed_error = np.abs(_outputs(model, x) - want).max()
    assert fused_error < 1e-3
    assert not decomposed_error < 1e-2  # even in FP32 E[x^2] - E[x]^2 cancels here (NaN where it goes negative)


def test_moment_difference_over_a_leading_axis_is_refused_with_the_reason():
    model = layernorm_form("moments_mul", "div", affine=False, axes=(1,))
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    assert report["refused"] == [{"anchor": "/ln/ReduceMean_0", "reason": "reduces over axis 1, not the trailing axes"}]


def test_epsilon_computed_at_run_time_is_refused_with_the_reason():
    _, report = fuse_layernorms(layernorm_form("centred_mul", "keras", eps_input=True))
    assert report["fused"] == []
    assert report["refused"] == [{"anchor": "/ln/ReduceMean_0", "reason": "epsilon 'eps_in' is not a constant scalar"}]


def test_jax2tf_form_with_a_dynamic_batch_is_fused_by_proving_the_reshape():
    # The Reshape target comes from Shape(x) at run time; data propagation proves it is [d0, 6, 1]
    # (one unknown dim, forced by the element count of the flat sum).
    model = layernorm_form("jax2tf", "reciprocal_gamma", dynamic=1)
    fused, report = fuse_layernorms(model)
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "MatMul"], report
    onnx.checker.check_model(fused, full_check=True)
    for batch in (1, 3):
        x = graphs.random_input((batch, *SHAPE[1:]))
        np.testing.assert_allclose(_outputs(fused, x), _outputs(model, x), rtol=1e-5, atol=1e-5)


def test_jax2tf_form_with_two_dynamic_dims_is_refused_because_the_reshape_is_not_provable():
    # Data propagation loses the dim names ([unk, unk, 1]): two unknowns are not forced by a count.
    model = layernorm_form("jax2tf", "reciprocal_gamma", dynamic=2)
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    (refusal,) = report["refused"]
    assert "not provably the keepdims shape ['d0', 'd1', 1]" in refusal["reason"]


def test_jax2tf_form_dividing_by_n_minus_1_is_refused_with_the_reason():
    # A sum scaled by 1/(N-1) is not a mean: fusing would change the variance.
    model = layernorm_form("jax2tf", "reciprocal_gamma", count=SHAPE[-1] - 1)
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    anchor = next(n.name for n in model.graph.node if n.output[0] == "mean")  # E[x], broadcast back
    assert report["refused"] == [{"anchor": anchor,
                                  "reason": "'one_over_n' is not the constant 1/16 that makes a sum a mean"}]


def _upgraded(tmp_path, model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The upgrade_opset pass on a file, as the stage runs it."""
    source, target = tmp_path / "source.onnx", tmp_path / "upgraded.onnx"
    onnx.save(model, str(source))
    report = upgrade_model(source, target, target_opset=17)
    return onnx.load(str(target)), report


def test_tf2onnx_global_average_pool_layernorm_is_fused_by_the_upgrade(tmp_path):
    # Keras LayerNormalization of [B, T, C] through tf2onnx at opset 17: both means are GlobalAveragePool.
    model = layernorm_form("gap_centred_mul", "keras")
    upgraded, report = _upgraded(tmp_path, model)
    assert [n.op_type for n in upgraded.graph.node] == ["LayerNormalization", "MatMul"], report
    fused = next(n for n in upgraded.graph.node if n.op_type == "LayerNormalization")
    assert onnx.helper.get_attribute_value(fused.attribute[0]) == -1  # axis: [2, 3) of a rank-3 x
    x = graphs.random_input(SHAPE)
    np.testing.assert_allclose(_outputs(upgraded, x), _outputs(model, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_outputs(upgraded, x), reference_layernorm(model, x), rtol=1e-4, atol=1e-4)


def test_spatial_global_average_pool_norm_is_fused_over_h_and_w_with_the_channel_affine_left():
    # An instance norm's means over H, W of NCHW (tf2onnx: a Transpose pushed through ReduceMean [1, 2] of
    # NHWC gives axes [2, 3], a GlobalAveragePool): LayerNormalization over the trailing H, W (axis -2) is
    # the same math; gamma/beta per channel ([C, 1, 1]) are not of the normalised dims, so they stay Mul/Add.
    shape = (2, 4, 5, 6)
    model = layernorm_form("gap_centred_mul", "reciprocal", shape=shape, gamma_shape=(4, 1, 1))
    fused, report = fuse_layernorms(model)
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "Mul", "Add", "MatMul"]
    (entry,) = report["fused"]
    assert entry["axis"] == -2 and not entry["affine"] and "gamma shape [4, 1, 1]" in entry["note"]
    onnx.checker.check_model(fused, full_check=True)
    x = graphs.random_input(shape)
    np.testing.assert_allclose(_outputs(fused, x), _outputs(model, x), rtol=1e-5, atol=1e-5)


def test_spatial_keras_form_with_a_channel_affine_is_refused_with_the_reason():
    # Keras' x * inv + (beta - mean * inv) folds gamma into inv: no affine-free sub-form to fuse.
    model = layernorm_form("gap_centred_mul", "keras", shape=(2, 4, 5, 6), gamma_shape=(4, 1, 1))
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    assert report["refused"] == [{"anchor": "/ln/GlobalAveragePool_0",
                                  "reason": "gamma shape [4, 1, 1] does not match the normalised dims [5, 6]"}]


def test_global_average_pool_of_unknown_rank_is_refused_with_the_reason():
    model = layernorm_form("gap_centred_pow", "div")
    model.graph.input[0].type.tensor_type.ClearField("shape")  # rank unknown: [2, rank) cannot be written
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    assert report["refused"] == [{"anchor": "/ln/GlobalAveragePool_0",
                                  "reason": "/ln/GlobalAveragePool_0 is a GlobalAveragePool and the rank of "
                                            "its input is unknown"}]


@pytest.mark.parametrize("folded", [False, True])
def test_unbiased_std_with_eps_on_the_std_is_left_as_it_is(tmp_path, folded):
    # gamma * (x - mean) / (std + eps) + beta with torch's unbiased std: not LayerNormalization (eps is
    # added to the std, the variance is N/(N-1) times larger), so the upgrade must not fuse it.
    model = unbiased_std_form(folded=folded)
    upgraded, report = _upgraded(tmp_path, model)
    assert "LayerNormalization" not in {n.op_type for n in upgraded.graph.node}
    assert [n.op_type for n in upgraded.graph.node] == [n.op_type for n in model.graph.node]
    x = graphs.random_input(SHAPE)
    np.testing.assert_allclose(_outputs(upgraded, x), _outputs(model, x), rtol=0, atol=0)
    np.testing.assert_allclose(_outputs(upgraded, x), reference_unbiased_std(model, x), rtol=1e-4, atol=1e-4)
    # what fusing it would compute instead is measurably different
    biased = reference_layernorm(model, x)
    assert np.abs(biased - reference_unbiased_std(model, x)).max() > 1e-2
