"""The tanh GELU's x^3 leaves FP16's range only where its Tanh saturates (issue 21, item 2).

The range rule kept the GELU's Pow/Mul/Add/Mul FP32 on T5-class FFNs (gates beyond 40); the
search keeps them FP16 and passes. Measured per sample: kept low precision only where the FP16
chain's inf gives the Tanh exactly what the reference gives.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision

CHAIN = ("/act/Pow", "/act/Mul_1", "/act/Add", "/act/Mul_2")


def _gelu_model(tanh_scale: float) -> onnx.ModelProto:
    """x -> MatMul (gate, |values| up to ~60) -> tanh GELU -> MatMul. `tanh_scale` multiplies the Tanh's input
    (sqrt(2/pi) in the GELU); a tiny one keeps the Tanh in its linear range where x^3 is large."""
    rng = np.random.RandomState(21)
    w1 = numpy_helper.from_array((rng.normal(0, 1.0, (16, 32)) * 3.0).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.1, (32, 8)).astype(np.float32), "w2")

    def const(name, value):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["gate"], name="/wi_0/MatMul"),
        helper.make_node("Mul", ["gate", "half"], ["half_x"], name="/act/Mul"),
        helper.make_node("Pow", ["gate", "three"], ["cubed"], name=CHAIN[0]),
        helper.make_node("Mul", ["cubed", "coefficient"], ["scaled_cube"], name=CHAIN[1]),
        helper.make_node("Add", ["gate", "scaled_cube"], ["inner"], name=CHAIN[2]),
        helper.make_node("Mul", ["inner", "tanh_scale"], ["y"], name=CHAIN[3]),
        helper.make_node("Tanh", ["y"], ["t"], name="/act/Tanh"),
        helper.make_node("Add", ["t", "one"], ["t1"], name="/act/Add_1"),
        helper.make_node("Mul", ["half_x", "t1"], ["gelu"], name="/act/Mul_3"),
        helper.make_node("MatMul", ["gelu", "w2"], ["out"], name="/wo/MatMul"),
    ]
    initializers = [w1, w2, const("half", 0.5), const("three", 3.0), const("coefficient", 0.044715),
                    const("tanh_scale", tanh_scale), const("one", 1.0)]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [64, 8])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _plan(model, feeds):
    name_nodes_as_parser_does(model)
    notes: dict = {}
    decisions, _ = plan_precision(network_from_model(model), precision_config(), feeds, notes)
    return decisions, notes


def _feeds():
    rng = np.random.RandomState(5)
    return [{"x": rng.normal(0, 1.0, (64, 16)).astype(np.float32)} for _ in range(2)]


def test_the_gelu_cube_stays_fp16_where_its_tanh_saturates_and_the_emulation_agrees():
    model, feeds = _gelu_model(math.sqrt(2.0 / math.pi)), _feeds()
    reference = ReferenceRunner(model, expose_intermediates=True).run(feeds[0])
    assert np.abs(reference["cubed"]).max() > 65504  # beyond FP16 itself, not only beyond max_abs
    decisions, notes = _plan(model, feeds)
    for name in CHAIN:
        assert decisions[name].precision == "fp16", (name, decisions[name].reason)
        assert "only where Tanh /act/Tanh saturates (saturating_chains.py)" in decisions[name].reason
    assert notes["saturating_chains"] == sorted(CHAIN)
    tolerated = {entry["tensor"] for entry in notes["boundaries"]["tolerated"]}
    assert "cubed" in tolerated
    # The materialised plan computes inf in the chain and still the reference's GELU.
    candidate, _ = materialize(model, {name: d.precision for name, d in decisions.items()})
    emulated = EmulatedRunner(candidate, expose_intermediates=True)
    for sample in feeds:
        values, exact = emulated.run(sample), ReferenceRunner(model).run(sample)["out"]
        assert np.isinf(values["cubed"]).any() and np.isfinite(values["out"]).all()
        assert np.linalg.norm(values["out"] - exact) / np.linalg.norm(exact) < 2e-3


def test_a_chain_whose_tanh_is_not_saturated_stays_fp32():
    # Tanh(1e-5 * (x + 0.044715 x^3)) is linear there: the cube's overflow would reach the output.
    decisions, notes = _plan(_gelu_model(1e-5), _feeds())
    assert notes["saturating_chains"] == []
    for name in CHAIN[:3]:
        assert decisions[name].precision == "fp32" and decisions[name].reason.startswith("activation range")
