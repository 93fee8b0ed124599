"""The reduce search in process, on a hand-written FP16 candidate whose failure is known: a variance
that overflows FP16 (`Pow` of values up to 300) zeroes a normalised tensor, and an unrelated branch
(`Relu`) joins it before the output. The smallest window that breaks the bound the same way
(finite error) is Pow -> ReduceMean -> Sqrt -> Div: the Mul before it is fed from the reference,
the Relu branch and the final Add are not needed. Every trial runs on the FP16 emulation."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.numerics.metrics import output_metrics
from trtpipe.reduce.failing_run import FailingRun, broken_bounds
from trtpipe.reduce.shrink import Reducer
from trtpipe.validate.compare import Tolerance, judge

FP16, FP32 = TensorProto.FLOAT16, TensorProto.FLOAT


def _model(low: bool) -> onnx.ModelProto:
    kind, dtype = (FP16, np.float16) if low else (FP32, np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["x_low"], name="x/cast", to=FP16)] if low else []
    x = "x_low" if low else "x"
    nodes += [
        # A mask-like constant saturated in FP16 (-3.4e38 -> -65504): off by 100%, read by no output.
        helper.make_node("Mul", [x, "minus_big"], ["m"], name="mask_scale"),
        helper.make_node("Mul", [x, "gain"], ["a"], name="scale"),
        helper.make_node("Pow", ["a", "two"], ["p"], name="square"),
        helper.make_node("ReduceMean", ["p"], ["v"], name="variance", axes=[-1], keepdims=1),
        helper.make_node("Sqrt", ["v"], ["s"], name="std"),
        helper.make_node("Div", ["a", "s"], ["n"], name="normalise"),
        helper.make_node("Relu", [x], ["r"], name="side"),
        helper.make_node("Add", ["n", "r"], ["y_low" if low else "y"], name="join"),
    ]
    if low:
        nodes.append(helper.make_node("Cast", ["y_low"], ["y"], name="y/cast", to=FP32))
    weights = [numpy_helper.from_array(np.array(300.0, dtype), "gain"), numpy_helper.from_array(np.array(2.0, dtype), "two"),
               numpy_helper.from_array(np.array(-65504.0 if low else -3.4e38, dtype), "minus_big")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FP32, [1, 64])],
                              [helper.make_tensor_value_info("y", FP32, [1, 64])], initializer=weights)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def failing():
    reference, candidate = _model(low=False), _model(low=True)
    feeds = {"x": np.random.RandomState(0).uniform(-1, 1, (1, 64)).astype(np.float32)}
    tolerance = Tolerance(rel_l2=0.014, cosine_min=0.9999)
    return FailingRun(run_dir=None, reference=reference, candidate=candidate, feeds=feeds, output="y",
                      tolerance=tolerance, bound="rel_l2", output_bounds=["rel_l2", "cosine_min"], origins=["square"],
                      nonfinite=False)


def test_the_window_is_the_overflowing_normalisation_alone(failing):
    reduced = Reducer(failing).reduce()
    assert [n["op_type"] for n in reduced.nodes] == ["Pow", "ReduceMean", "Sqrt", "Div"]
    assert reduced.output == "n" and set(reduced.inputs) == {"a"}
    assert reduced.inputs["a"].dtype == np.float16  # the plan's type of the cut tensor
    assert "rel_l2" in reduced.broken and reduced.metrics["nonfinite"] == 0
    onnx.checker.check_model(reduced.model, full_check=True)


def test_a_failure_of_another_kind_is_not_a_reproduction(failing):
    """The Pow alone overflows to inf, which breaks rel_l2 too, but the run's output was finite and
    off: a window ending at `p` is not the same failure (a tolerance that only non-finite values break
    finds no window but the whole model)."""
    from dataclasses import replace

    reducer = Reducer(failing)
    assert "p" not in reducer._ends() and "n" in reducer._ends()
    nonfinite_run = replace(failing, nonfinite=True, bound="nonfinite")
    assert [n["op_type"] for n in Reducer(nonfinite_run).reduce().nodes] == ["Pow"]


def test_ends_start_from_localisation_origins(failing):
    """The saturated mask breaks rel_l2 first in graph order but is not why the output fails; localisation
    names the origin (`square`), and the search starts there. Without origins it would reduce to the mask."""
    from dataclasses import replace

    assert Reducer(failing)._ends()[0] == "n"
    unanchored = Reducer(replace(failing, origins=[]))
    assert unanchored._ends()[0] == "m"
    assert [n["op_type"] for n in unanchored.reduce().nodes] == ["Mul"]


def test_broken_bounds_agree_with_validate_judge():
    rng = np.random.RandomState(1)
    reference = rng.randn(256).astype(np.float32)
    tolerance = Tolerance(rel_l2=0.014, cosine_min=0.9999, max_abs=0.5)
    for noise in (0.0, 1e-4, 0.02, 0.5, 3.0):
        metrics = output_metrics(reference, reference + noise * rng.randn(256).astype(np.float32))
        passed, reasons = judge(metrics, tolerance)
        assert passed == (not broken_bounds(metrics, tolerance)), (noise, reasons)
    overflowed = reference.copy()
    overflowed[3] = np.inf
    metrics = output_metrics(reference, overflowed)
    assert broken_bounds(metrics, tolerance)[0] == "nonfinite" and not judge(metrics, tolerance)[0]
