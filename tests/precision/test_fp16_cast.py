"""ONNX Runtime's Cast (used for large weights) rounds float32 -> float16 exactly like NumPy."""

import numpy as np

from trtpipe.precision.materialize.fp16_cast import MIN_ELEMENTS_FOR_ORT, to_float16


def hard_cases() -> np.ndarray:
    """Every float16 value, the float32 midpoints between neighbours (ties) and one float32 ulp either side."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float32))
    midpoints = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    midpoints = midpoints.astype(np.float32)
    around = [np.nextafter(midpoints, np.float32(np.inf)), np.nextafter(midpoints, np.float32(-np.inf))]
    extremes = np.array([65504, 65519.996, 65520, 1e30, -1e30, np.inf, -np.inf, -0.0, 0.0,
                         2**-24, 2**-25, 2**-26, 3 * 2**-26, -(2**-25)], dtype=np.float32)
    return np.concatenate([finite, midpoints, *around, extremes])


def test_large_arrays_match_numpy_bit_for_bit():
    values = hard_cases()
    assert values.size >= MIN_ELEMENTS_FOR_ORT, "the ONNX Runtime path is the one under test"
    with np.errstate(over="ignore"):  # 65520 and beyond round to inf, deliberately
        ours, numpy = to_float16(values), values.astype(np.float16)
    assert ours.dtype == np.float16 and ours.shape == values.shape
    np.testing.assert_array_equal(ours.view(np.uint16), numpy.view(np.uint16))


def test_shape_is_kept_and_nan_stays_nan():
    values = np.random.default_rng(0).standard_normal((4, 64, 512)).astype(np.float32)
    values[1, 2, 3] = np.nan
    converted = to_float16(values)
    assert converted.shape == values.shape
    assert np.isnan(converted[1, 2, 3])
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(converted[finite].view(np.uint16), values[finite].astype(np.float16).view(np.uint16))


def test_small_arrays_use_numpy():
    values = np.array([1.0, 65520.0, 2**-25], dtype=np.float32)
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(to_float16(values).view(np.uint16), expected.view(np.uint16))
