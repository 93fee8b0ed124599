"""RMSNorm in T5's reciprocal form, `weight * (x * (1 / sqrt(mean(x^2) + eps)))`, is one FP32 group."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.precision.test_auto_rules import builtin_plan, plan
from trtpipe.numerics.reference import ReferenceRunner

GROUP = "normalization group: decomposed RMSNorm"


def test_every_t5_rmsnorm_is_one_group_including_the_scale_and_gain():
    _, decisions = builtin_plan("t5", auto={"max_abs": None, "constants": "off"})
    norms = {n.rsplit("/", 1)[0] for n in decisions if "layer_norm/" in n}
    assert len(norms) == 2 * 4 + 1
    for scope in norms:
        members = {n.rsplit("/", 1)[1] for n in decisions if n.startswith(scope + "/") and decisions[n].reason.startswith(GROUP)}
        assert members == {"Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Mul_1"}, (scope, members)
    matmuls = [d for n, d in decisions.items() if n.endswith("MatMul")]
    assert matmuls and all(d.precision == "fp16" for d in matmuls)


def _reciprocal_norm(scaled_input: str):
    """x^2 -> mean -> +eps -> sqrt -> 1/. -> Mul(scaled_input, .) -> Mul(gamma, .)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    other = helper.make_tensor_value_info("other", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             [("two", 2.0), ("eps", 1e-6), ("one", [1.0]), ("gamma", np.linspace(0.5, 1.5, 8))]]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["var"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["shifted"], name="add_eps"),
             helper.make_node("Sqrt", ["shifted"], ["rms"], name="sqrt"),
             helper.make_node("Div", ["one", "rms"], ["inv"], name="inverse"),
             helper.make_node("Mul", [scaled_input, "inv"], ["normed"], name="apply"),
             helper.make_node("Mul", ["gamma", "normed"], ["y"], name="gain")]
    graph = helper.make_graph(nodes, "g", [x, other], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_the_scale_joins_the_group_only_when_it_scales_the_squared_tensor():
    model = _reciprocal_norm("x")
    feeds = {"x": np.random.default_rng(0).normal(0, 3, (2, 8)).astype(np.float32), "other": np.ones((2, 8), np.float32)}
    (out,) = ReferenceRunner(model).run(feeds).values()
    x = feeds["x"].astype(np.float64)
    expected = np.linspace(0.5, 1.5, 8) * x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, expected, rtol=1e-5)  # the graph is the RMSNorm it claims to be
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert all(decisions[n].reason.startswith(GROUP) for n in ("pow", "inverse", "apply", "gain"))

    _, decisions = plan(_reciprocal_norm("other"), auto={"max_abs": None, "constants": "off"})
    assert decisions["inverse"].reason.startswith(GROUP)
    assert decisions["apply"].precision == "fp16" and decisions["gain"].precision == "fp16"


def test_an_rmsnorm_whose_mean_is_tf2onnx_global_average_pool_is_one_group():
    # tf2onnx writes a ReduceMean over [2, rank) as GlobalAveragePool: a [B, T, C] RMSNorm over C.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             [("two", 2.0), ("eps", 1e-6), ("gamma", np.linspace(0.5, 1.5, 8))]]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"], name="pow"),
             helper.make_node("GlobalAveragePool", ["sq"], ["var"], name="mean"),
             helper.make_node("Add", ["var", "eps"], ["shifted"], name="add_eps"),
             helper.make_node("Sqrt", ["shifted"], ["rms"], name="sqrt"),
             helper.make_node("Div", ["x", "rms"], ["normed"], name="normalize"),
             helper.make_node("Mul", ["gamma", "normed"], ["y"], name="gain")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.random.default_rng(0).normal(0, 3, (2, 3, 8)).astype(np.float32)}
    (out,) = ReferenceRunner(model).run(feeds).values()
    value = feeds["x"].astype(np.float64)
    expected = np.linspace(0.5, 1.5, 8) * value / np.sqrt((value**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, expected, rtol=1e-5)  # the graph is the RMSNorm it claims to be
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert all(d.reason.startswith(GROUP) and d.precision == "fp32" for d in decisions.values()), decisions
