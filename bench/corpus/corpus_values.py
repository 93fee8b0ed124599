"""Running a model as it is in ONNX Runtime, and judging whether two runs agree.

Used for the stages that must not change numerics (sanitize, upgrade_opset):
their output is run on the test's own inputs and compared with the original.

Decisions:
- Sessions run with every graph optimisation off and one thread, as trtpipe's
  validation does: the comparison is of the graphs, not of ONNX Runtime's fusions.
- Tolerances follow the output's element type: integers, bool and strings
  must be equal; floats are compared with `rtol`/`atol` of that type
  (FLOAT_TOLERANCES: room for a kernel of another opset version summing in
  another order, far below any change of what is computed), NaN where the
  original has NaN, inf of the same sign.
  An element type or shape that changed is a mismatch whatever the values.
- Sequences compare element by element; an empty optional only equals an empty one.
"""

from __future__ import annotations

import numpy as np

from trtpipe.numerics.input_types import is_float

# dtype name -> (rtol, atol)
FLOAT_TOLERANCES = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}
# FP8/FP4 and other ml_dtypes floats: one step of a 2-3 bit mantissa.
LOW_BIT_FLOAT_TOLERANCE = (0.25, 0.0)


def ort_session(model_path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def ort_run(model_path: str, feeds: dict) -> dict:
    session = ort_session(model_path)
    names = [output.name for output in session.get_outputs()]
    known = {value.name for value in session.get_inputs()}
    return dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in known})))


def mismatch(expected: dict, actual: dict) -> str | None:
    """None when every output of `expected` agrees with `actual`; otherwise the first reason."""
    for name, want in expected.items():
        if name not in actual:
            return f"output {name!r} is missing"
        reason = _value_mismatch(want, actual[name])
        if reason:
            return f"output {name!r}: {reason}"
    return None


def _value_mismatch(want, got) -> str | None:
    if want is None or got is None:
        return None if want is None and got is None else "optional presence differs"
    if isinstance(want, list) or isinstance(got, list):
        if not (isinstance(want, list) and isinstance(got, list)) or len(want) != len(got):
            return "sequence length differs"
        return next((f"element {i}: {r}" for i, (w, g) in enumerate(zip(want, got))
                     if (r := _value_mismatch(w, g))), None)
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype:
        return f"element type {got.dtype} differs from {want.dtype}"
    if want.shape != got.shape:
        return f"shape {list(got.shape)} differs from {list(want.shape)}"
    if not is_float(want.dtype):
        equal = np.array_equal(want, got)
        return None if equal else f"{int(np.sum(want != got))} of {want.size} values differ ({want.dtype})"
    rtol, atol = FLOAT_TOLERANCES.get(want.dtype.name, LOW_BIT_FLOAT_TOLERANCE)
    w, g = want.astype(np.float64), got.astype(np.float64)
    close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    worst = float(np.nanmax(np.where(close, 0.0, np.abs(g - w)))) if np.isfinite(g - w).any() else float("nan")
    return f"{int((~close).sum())} of {w.size} values differ (max abs {worst:.3g}, {want.dtype}, rtol {rtol})"


def same_runs(first: dict, second: dict) -> bool:
    """True when two runs of the same model agree exactly (NaN equal to NaN)."""
    return all(_identical(first[name], second.get(name)) for name in first)


def _identical(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _identical(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a.shape == b.shape and np.array_equal(a, b)
