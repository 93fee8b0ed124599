"""Issue 16: FP32 only where evidence requires it, and the fewest Casts around it.

Real graphs, planned by `plan_precision`, materialised, and run on the FP16 emulator.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.plan_document import plan_document
from trtpipe.precision.plan.planner import plan_precision

HIDDEN = 16


def _plan(model, feeds, **auto):
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    config = precision_config(auto={"island_size": 2, "fewest_casts": True, **auto})
    decisions, matches = plan_precision(net, config, feeds)
    mixed, report = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()})
    onnx.checker.check_model(mixed, full_check=True)
    return decisions, mixed, plan_document(net, decisions, matches, "fp16", report)


def _casts(model) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Cast"]


def _rel_l2(reference, candidate) -> float:
    reference, candidate = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    return float(np.linalg.norm(candidate - reference) / np.linalg.norm(reference))


def _layernorm_between_matmuls():
    """MatMul -> LayerNormalization -> MatMul: the norm's neighbours are heavy, they stay FP16."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (HIDDEN, HIDDEN)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (HIDDEN, HIDDEN)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.linspace(0.5, 1.5, HIDDEN).astype(np.float32), "gamma"),
             numpy_helper.from_array(np.linspace(-0.1, 0.1, HIDDEN).astype(np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(scale: float, seed: int = 1):
    return [{"x": (np.random.default_rng(seed + i).normal(0, scale, (4, HIDDEN))).astype(np.float32)} for i in range(2)]


def test_a_layernorm_whose_input_fits_ends_fp16_without_casts_and_stays_accurate():
    model = _layernorm_between_matmuls()
    feeds = _feeds(1.0)
    decisions, mixed, _ = _plan(model, feeds)
    assert decisions["ln"].precision == "fp16", decisions["ln"]
    assert [c.input[0] for c in _casts(mixed)] == ["x", "y/fp16"]  # only the graph's own I/O
    reference, emulated = ReferenceRunner(model), EmulatedRunner(mixed)
    for feed in _feeds(1.0, seed=7):  # held-out inputs
        assert _rel_l2(reference.run(feed)["y"], emulated.run(feed)["y"]) < 2e-3


def test_a_layernorm_whose_statistics_overflow_fp16_stays_protected():
    model = _layernorm_between_matmuls()
    feeds = _feeds(400.0)  # h ~ 1e3: (h - E[h])^2 far beyond 65504
    decisions, mixed, document = _plan(model, feeds)
    # The range rule measures the norm's hidden (x - E[x])^2 (auto_range.py): that is the evidence.
    assert decisions["ln"].precision == "fp32" and decisions["ln"].reason.startswith("activation range")
    assert decisions["mm1"].precision == "fp16" and decisions["mm2"].precision == "fp16"
    assert len(_casts(mixed)) == 4  # x, into the norm, out of it, y
    assert document["totals"]["casts_by_reason"] == {"activation range": 2, "keep_io_types": 2}
    feed = _feeds(400.0, seed=7)[0]
    expected = ReferenceRunner(model).run(feed)["y"]
    assert _rel_l2(expected, EmulatedRunner(mixed).run(feed)["y"]) < 2e-3
    # Left FP16, the emulated FP16 statistics overflow: the protection is what keeps it accurate.
    naive, _ = materialize(model, {n: "fp16" for n in ("mm1", "ln", "mm2")})
    unprotected = EmulatedRunner(naive).run(feed)["y"]
    assert not np.isfinite(unprotected).all() or _rel_l2(expected, unprotected) > 0.1


def _moment_difference_norm():
    """E[x^2] - E[x]^2 LayerNorm (jax2tf style) feeding a MatMul."""
    inits = [numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(np.eye(HIDDEN, dtype=np.float32), "w")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[-1]),
             helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["second"], name="second", axes=[-1]),
             helper.make_node("Mul", ["mean", "mean"], ["mean_sq"], name="mean_square"),
             helper.make_node("Sub", ["second", "mean_sq"], ["var"], name="variance"),
             helper.make_node("Add", ["var", "eps"], ["var_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["var_eps"], ["std"], name="sqrt"),
             helper.make_node("Sub", ["x", "mean"], ["centred"], name="centre"),
             helper.make_node("Div", ["centred", "std"], ["normed"], name="normalise"),
             helper.make_node("MatMul", ["normed", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_moment_difference_with_a_large_mean_keeps_its_statistics_fp32():
    model = _moment_difference_norm()
    offset = [{"x": (20 + np.random.default_rng(i).normal(0, 1, (4, HIDDEN))).astype(np.float32)} for i in range(2)]
    decisions, mixed, _ = _plan(model, offset)
    group = ("mean", "square", "second", "mean_square", "variance", "sqrt", "normalise")
    assert all(decisions[n].precision == "fp32" for n in group), {n: decisions[n].reason for n in group}
    assert "E[x^2] - E[x]^2" in decisions["variance"].reason and decisions["mm"].precision == "fp16"
    feed = {"x": (20 + np.random.default_rng(9).normal(0, 1, (4, HIDDEN))).astype(np.float32)}
    assert _rel_l2(ReferenceRunner(model).run(feed)["y"], EmulatedRunner(mixed).run(feed)["y"]) < 2e-3

    centred = [{"x": np.random.default_rng(i).normal(0, 1, (4, HIDDEN)).astype(np.float32)} for i in range(2)]
    decisions, mixed, _ = _plan(model, centred)  # same graph, mean ~0: no evidence, FP16
    assert decisions["variance"].precision == "fp16" and decisions["normalise"].precision == "fp16"
    feed = {"x": np.random.default_rng(9).normal(0, 1, (4, HIDDEN)).astype(np.float32)}
    assert _rel_l2(ReferenceRunner(model).run(feed)["y"], EmulatedRunner(mixed).run(feed)["y"]) < 5e-3


def test_softmax_with_a_fitting_range_goes_fp16():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "w"], ["y"], name="mix")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, HIDDEN])],
                              [numpy_helper.from_array(rng.normal(0, 0.3, (HIDDEN, HIDDEN)).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    decisions, mixed, _ = _plan(model, _feeds(1.0), softmax=True)
    assert decisions["softmax"].precision == "fp16"
    assert len(_casts(mixed)) == 2
    feed = _feeds(1.0, seed=5)[0]
    assert _rel_l2(ReferenceRunner(model).run(feed)["y"], EmulatedRunner(mixed).run(feed)["y"]) < 3e-3
    always, _, _ = _plan(model, _feeds(1.0), softmax=True, protect="always")
    assert always["softmax"].precision == "fp32"


def _fp32_node_between_reshapes():
    """x (FP32 graph input) -> Reshape -> Exp (kept FP32 by a rule) -> Reshape -> MatMul -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (HIDDEN, HIDDEN)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([4, 4, 4], np.int64), "split"),
             numpy_helper.from_array(np.array([4, HIDDEN], np.int64), "merge")]
    nodes = [helper.make_node("Reshape", ["x", "split"], ["b"], name="split_heads"),
             helper.make_node("Exp", ["b"], ["c"], name="exp"),
             helper.make_node("Reshape", ["c", "merge"], ["d"], name="merge_heads"),
             helper.make_node("MatMul", ["d", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_fp32_node_between_reshapes_costs_two_casts_not_four():
    model = _fp32_node_between_reshapes()
    rules = {"exp_fp32": {"match": "exact", "pattern": "exp", "precision": "fp32"}}
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    plain_config = precision_config(rules=rules, auto={"max_abs": None, "fewest_casts": False})
    plain, _ = plan_precision(net, plain_config, None)
    plain_mixed, _ = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in plain.items()})
    lean_config = precision_config(rules=rules, auto={"max_abs": None, "fewest_casts": True})
    notes: dict = {}
    lean, matches = plan_precision(net, lean_config, None, notes)
    mixed, report = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in lean.items()})
    # Plain: x -> fp16 for the Reshape, back to fp32 for Exp, its output to fp16, y to fp32.
    assert len(_casts(plain_mixed)) == 4
    # Lean: the first Reshape joins Exp and reads x as it is; one Cast out of the island, one for y.
    assert len(_casts(mixed)) == 2
    assert lean["split_heads"].precision == "fp32" and lean["split_heads"].reason.startswith("fewest Casts")
    assert lean["merge_heads"].precision == "fp16" and lean["mm"].precision == "fp16"  # a tie stays fp16
    assert notes["fewest_casts"]["casts_after"] < notes["fewest_casts"]["casts_before"]
    totals = plan_document(net, lean, matches, "fp16", report)["totals"]
    assert totals["casts_by_reason"] == {"keep_io_types": 1, "rule exp_fp32": 1}
    feed = _feeds(1.0, seed=3)[0]
    expected = ReferenceRunner(model).run(feed)["y"]
    lean_error = _rel_l2(expected, EmulatedRunner(mixed).run(feed)["y"])
    assert lean_error <= _rel_l2(expected, EmulatedRunner(plain_mixed).run(feed)["y"]) and lean_error < 2e-3


def test_fewest_casts_never_moves_a_node_a_rule_set():
    model = _fp32_node_between_reshapes()
    rules = {"exp_fp32": {"match": "exact", "pattern": "exp", "precision": "fp32"},
             "split_fp16": {"match": "exact", "pattern": "split_heads", "precision": "fp16"}}
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(rules=rules, auto={"max_abs": None, "fewest_casts": True}), None)
    assert decisions["split_heads"].precision == "fp16"  # a user rule is not moved, though it would save a Cast
    assert decisions["mm"].precision == "fp16"


def test_the_plan_is_the_same_bytes_whatever_the_string_hashing(tmp_path):
    """fewest_casts iterated a set of node names, so `moved` (13 nodes on t5 then) came out in the
    process's hash order: precision_plan.json differed between two runs of the same config. The T5 v1.1
    export's position-bias arithmetic is where fewest Casts moves nodes today (7)."""
    from tests.cli_helpers import run_trtpipe
    from tests.models.hf_t5_export import INPUT_SPECS, build_hf_t5

    path = tmp_path / "t5_v1_1.onnx"
    path.write_bytes(build_hf_t5().SerializeToString())
    inputs = [f"++data.inputs.{name}={{low:{spec['low']},high:{spec['high']},dtype:int64,shape:{spec['shape']}}}"
              for name, spec in INPUT_SPECS.items()]
    plans = []
    for seed in ("1", "2"):
        run = run_trtpipe(tmp_path, "+recipe=transformer_fp16", f"model.path={path}", *inputs,
                          "stages=[sanitize,upgrade_opset,precision]", cache=tmp_path / f"cache-{seed}",
                          run_name=f"seed-{seed}", env={"PYTHONHASHSEED": seed})
        assert run.code == 0, run.stderr
        plans.append((run.run_dir / "precision" / "precision_plan.json").read_text())
    import json

    moved = [json.loads(plan)["fewest_casts"]["moved"] for plan in plans]
    assert len(moved[0]) > 1 and moved[0] == moved[1]
    assert plans[0] == plans[1]
