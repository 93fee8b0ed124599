"""An FP16 LayerNormalization is emulated as TensorRT's strongly typed normalization computes it:
in its input's type (numerics/low_precision_norm.py cites the documentation)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.numerics.emulator import EmulatedRunner


def _fp16_layernorm(opset: int, with_bias: bool = True, axis: int = -1):
    inputs = ["x", "gamma", "beta"] if with_bias else ["x", "gamma"]
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float16), "gamma"),
             numpy_helper.from_array(np.linspace(-0.2, 0.2, 8).astype(np.float16), "beta")]
    graph = helper.make_graph([helper.make_node("LayerNormalization", inputs, ["y"], name="ln", axis=axis)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 8])],
                              inits[: len(inputs) - 1])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _stepwise_fp16(x, gamma, beta):
    """The ONNX function body, every intermediate rounded to FP16, reductions accumulated in FP32."""
    r = lambda v: np.asarray(v, np.float32).astype(np.float16).astype(np.float32)  # noqa: E731
    x = x.astype(np.float32)
    mean = r(x.mean(-1, keepdims=True))
    centred = r(x - mean)
    with np.errstate(over="ignore"):
        variance = r(r(centred * centred).mean(-1, keepdims=True))
    std = r(np.sqrt(r(variance + np.float32(np.float16(1e-5)))))
    out = r(r(centred * r(1 / std)) * gamma)
    return out if beta is None else r(out + beta)


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("with_bias", [True, False])
def test_statistics_are_computed_and_rounded_in_fp16(opset, with_bias):
    x = (np.random.default_rng(0).normal(0, 1, (3, 8)) * np.array([[1], [30], [400]])).astype(np.float16)
    gamma, beta = np.linspace(0.5, 1.5, 8).astype(np.float32), np.linspace(-0.2, 0.2, 8).astype(np.float32)
    y = EmulatedRunner(_fp16_layernorm(opset, with_bias)).run({"x": x})["y"]
    expected = _stepwise_fp16(x, gamma, beta if with_bias else None)
    np.testing.assert_allclose(y, expected, rtol=2**-10, atol=2**-10)  # one FP16 ulp: summation order
    # Row 3: (x - E[x])^2 beyond 65504 is inf in FP16, so the normalised row collapses to the bias.
    with np.errstate(over="ignore"):
        assert np.isinf(((x[2].astype(np.float32) - x[2].astype(np.float32).mean()) ** 2).astype(np.float16)).any()
    assert np.abs(y[2] - (beta if with_bias else 0)).max() < 1e-3
    # Rows that fit agree with FP32 statistics to FP16's precision.
    x32 = x[:2].astype(np.float32)
    fp32 = (x32 - x32.mean(-1, keepdims=True)) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5) * gamma
    fp32 = fp32 + (beta if with_bias else 0)
    assert np.abs(y[:2] - fp32).max() < 1e-2


def test_a_non_negative_axis_is_emulated_in_fp16_too():
    """Review: the rank was never passed, so axis=1 (as some exporters write it) silently fell back to
    FP32 statistics with a note; the rank now comes from shape inference."""
    x = (np.random.default_rng(1).normal(0, 1, (3, 8)) * np.array([[1], [30], [400]])).astype(np.float16)
    runner = EmulatedRunner(_fp16_layernorm(17, axis=1))
    assert not [note for note in runner.notes if "LayerNormalization" in note]
    np.testing.assert_array_equal(runner.run({"x": x})["y"], EmulatedRunner(_fp16_layernorm(17)).run({"x": x})["y"])
