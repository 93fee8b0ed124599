"""±inf and NaN constants are FP16 (and BF16) values (issue 30 item 3): their consumers stay low precision,
the materialiser stores them unchanged, the emulator reads them back; only finite values beyond the type's
range are guarded (auto_constants.py) or clipped and reported (weights.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.graphs import make_model, value
from tests.precision.test_stored_tensors import emulated, run_stage
from trtpipe.precision.auto.auto_constants import constant_problems
from trtpipe.precision.network.network import network_from_model

RNG = np.random.default_rng(30)
INF, NAN = float("inf"), float("nan")
RTOL = {"fp16": 2e-3, "bf16": 1e-2}  # a few roundings of the type (2^-11, 2^-8 relative)


def masked_fill(fill) -> tuple:
    """y = Where(mask, fill, x) * 2: `masked_fill` as exported, `fill` a scalar or a [2, 8] initializer."""
    nodes = [helper.make_node("Where", ["mask", "fill", "x"], ["filled"], name="fill"),
             helper.make_node("Mul", ["filled", "two"], ["y"], name="scale")]
    inits = [numpy_helper.from_array(np.array(fill, np.float32), "fill"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    model = make_model(nodes, [value("mask", [2, 8], TensorProto.BOOL), value("x", [2, 8])], [value("y", [2, 8])],
                       inits)
    mask = np.zeros([2, 8], bool)
    mask[:, 5:] = True
    return model, {"mask": mask, "x": RNG.standard_normal([2, 8]).astype(np.float32)}


def stored_fill(candidate) -> tuple[int, np.ndarray]:
    tensor = next(t for t in candidate.graph.initializer if t.name == "fill")
    if tensor.data_type == TensorProto.BFLOAT16:
        bits = np.frombuffer(tensor.raw_data, "<u2").astype(np.uint32) << 16
        return tensor.data_type, bits.view(np.float32).reshape(tuple(tensor.dims))
    return tensor.data_type, numpy_helper.to_array(tensor)


MIXED = [[-INF] * 4 + [0.5, -1.0, NAN, INF]] * 2


@pytest.mark.parametrize("default", ["fp16", "bf16"])
@pytest.mark.parametrize("fill", [-INF, INF, NAN, MIXED], ids=["-inf", "inf", "nan", "mixed"])
def test_infinite_and_nan_constants_leave_their_consumer_low_precision(tmp_path, default, fill):
    model, feeds = masked_fill(fill)
    candidate, plan = run_stage(tmp_path, model, feeds, default=default)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["fill"]["precision"] == default, nodes["fill"]
    assert [n.op_type for n in candidate.graph.node].count("Cast") == 2  # keep_io_types: x in, y out
    assert plan["totals"]["saturated"] == []
    elem_type, stored = stored_fill(candidate)
    assert elem_type == (TensorProto.FLOAT16 if default == "fp16" else TensorProto.BFLOAT16)
    np.testing.assert_array_equal(stored.astype(np.float32), np.array(fill, np.float32))  # NaN == NaN here
    expected, got = emulated(model, candidate, feeds)
    assert np.array_equal(np.isnan(got), np.isnan(expected)) and np.array_equal(np.isinf(got), np.isinf(expected))
    assert (got[np.isinf(got)] == expected[np.isinf(expected)]).all()  # the same signs
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=RTOL[default])


@pytest.mark.parametrize("fill, magnitude", [
    (1e5, "1e+05"), (-3.4028234663852886e38, "3.4e+38"),
    ([[-INF, 7e4] * 4] * 2, "7e+04"),  # an inf does not hide a finite value beyond the range ...
    ([[NAN, -1e6] * 4] * 2, "1e+06"),  # ... nor does a NaN (NumPy's max of it is NaN)
], ids=["1e5", "finfo.min", "inf-and-7e4", "nan-and-1e6"])
def test_finite_values_beyond_65504_still_keep_their_consumer_fp32(tmp_path, fill, magnitude):
    model, feeds = masked_fill(fill)
    _, plan = run_stage(tmp_path, model, feeds)
    where = next(n for n in plan["nodes"] if n["name"] == "fill")
    assert where["precision"] == "fp32"
    assert f"constant fill has |value| {magnitude} > 65504 (would become inf in fp16)" in where["reason"]


def test_bf16_clips_only_finite_values_beyond_its_range_and_reports_them(tmp_path):
    # finfo(float32).min rounds to -inf in BF16: clipped to BF16's lowest (3.3895e38) and reported; -inf is kept.
    model, feeds = masked_fill([[-3.4028234663852886e38, -INF] * 4] * 2)
    candidate, plan = run_stage(tmp_path, model, feeds, default="bf16")
    assert next(n for n in plan["nodes"] if n["name"] == "fill")["precision"] == "bf16"
    assert [(s["tensor"], s["to"]) for s in plan["totals"]["saturated"]] == [("fill", "bf16")]
    _, stored = stored_fill(candidate)
    assert np.isfinite(stored[:, 0::2]).all() and (stored[:, 1::2] == -INF).all()


def flush_problem(values):
    model = make_model([helper.make_node("Mul", ["x", "c"], ["y"], name="scale")], [value("x", [len(values)])],
                       [value("y", [len(values)])], [numpy_helper.from_array(np.array(values, np.float32), "c")])
    return constant_problems(network_from_model(model), "fp16").get("c")


def test_the_flushed_share_is_taken_among_the_finite_values():
    # An inf or NaN entry has no L2 norm to compare with: beside them, a 1e-9 that is the only other value is all
    # of the constant's finite norm (before: share 0 with an inf, NaN with a NaN).
    for extra in (-INF, NAN):
        problem = flush_problem([extra, 1e-9])
        assert problem is not None and problem.kind == "flushes" and problem.flushed_share == pytest.approx(1.0)
    assert flush_problem([-INF, NAN, 1.0]) is None
