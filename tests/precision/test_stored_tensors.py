"""Every tensor the plan stores in FP16 fits FP16 (auto_boundaries.py): boundary Casts, graph
inputs under keep_io_types=false, weights. Each model overflows under the plan without the
check (emulated: inf), and passes with it, the reason in precision_plan.json."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.graphs import make_model, value
from tests.precision.models import precision_config
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.stages.precision import PlanPrecision

RNG = np.random.default_rng(3)


def _weight(name, shape, scale):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def power_spectrum() -> tuple[onnx.ModelProto, dict]:
    """STFT-like re/im of ~6e4, |X|² ~ 4e9 (FP32, range rule), Log of it in FP16 would read inf."""
    nodes = [helper.make_node("Pow", ["re", "two"], ["re2"], name="re_sq"),
             helper.make_node("Mul", ["im", "im"], ["im2"], name="im_sq"),
             helper.make_node("Add", ["re2", "im2"], ["power"], name="power"),
             helper.make_node("Log", ["power"], ["logp"], name="log"),
             helper.make_node("MatMul", ["logp", "w"], ["y"], name="mel")]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"), _weight("w", [64, 16], 0.1)]
    model = make_model(nodes, [value("re", [2, 64]), value("im", [2, 64])], [value("y", [2, 16])], inits)
    feeds = {name: RNG.uniform(1e4, 6e4, [2, 64]).astype(np.float32) for name in ("re", "im")}
    return model, feeds


def dequantised_accumulator() -> tuple[onnx.ModelProto, dict]:
    """int32 accumulators -> Cast -> Mul(scale) ~1e5 (FP32, range rule) -> MatMul whose output is small."""
    nodes = [helper.make_node("Cast", ["acc"], ["acc_f"], name="dequant_cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["acc_f", "scale"], ["deq"], name="dequant_scale"),
             helper.make_node("MatMul", ["deq", "w"], ["mm"], name="fc"),
             helper.make_node("Add", ["mm", "b"], ["y"], name="fc_bias")]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "scale"), _weight("w", [16, 8], 1e-3),
             _weight("b", [8], 0.1)]
    model = make_model(nodes, [value("acc", [2, 16], TensorProto.INT32)], [value("y", [2, 8])], inits)
    feeds = {"acc": RNG.integers(-2_000_000, 2_000_000, [2, 16]).astype(np.int32)}
    return model, feeds


def loud_input() -> tuple[onnx.ModelProto, dict]:
    """Audio scaled in FP32 before export: a graph input of ±2e5, normalised by the first node."""
    nodes = [helper.make_node("Mul", ["audio", "gain"], ["norm"], name="normalise"),
             helper.make_node("MatMul", ["norm", "w"], ["y"], name="frame_proj")]
    inits = [numpy_helper.from_array(np.array(1 / 32768, np.float32), "gain"), _weight("w", [32, 8], 0.2)]
    model = make_model(nodes, [value("audio", [2, 32])], [value("y", [2, 8])], inits)
    return model, {"audio": RNG.uniform(-2e5, 2e5, [2, 32]).astype(np.float32)}


def large_weight() -> tuple[onnx.ModelProto, dict]:
    """A weight with one value beyond 65504 (protected by the constants rule, as before)."""
    w = (RNG.standard_normal([16, 8]) * 0.1).astype(np.float32)
    w[3, 5] = 1e5
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
             helper.make_node("Relu", ["mm"], ["y"], name="act")]
    model = make_model(nodes, [value("x", [2, 16])], [value("y", [2, 8])], [numpy_helper.from_array(w, "w")])
    x = RNG.uniform(-1e-2, 1e-2, [2, 16]).astype(np.float32)
    # The input the large value multiplies is positive: the Relu passes what clipping changes
    # whatever state the module's RNG is in (which tests ran before in this worker).
    x[:, 3] = np.abs(x[:, 3]) + 1e-3
    return model, {"x": x}


def run_stage(tmp_path, model, feeds, **config) -> tuple[onnx.ModelProto, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source, data, out = tmp_path / "in.onnx", tmp_path / "feeds.npz", tmp_path / "out"
    onnx.save(model, str(source))
    np.savez(data, **feeds)
    out.mkdir()
    block = {"path": str(data), "sha256": None, "seed": 0, "iterations": 1, "inputs": {}}
    PlanPrecision().run({"model": source}, {**precision_config(**config), "data": block}, out)
    return onnx.load(str(out / "model.onnx")), json.loads((out / "precision_plan.json").read_text())


def emulated(model, candidate, feeds) -> tuple[np.ndarray, np.ndarray]:
    expected = ReferenceRunner(model).run(feeds)["y"]
    return expected, np.asarray(EmulatedRunner(candidate).run(feeds)["y"], dtype=np.float64)


def without_check(model, plan, keep_io_types=True) -> onnx.ModelProto:
    """The same plan with the nodes the check moved put back in fp16 (what the plan was before it)."""
    moved = {entry["node"] for entry in plan["boundaries"]["kept_fp32"]}
    precision = {n["name"]: "fp16" if n["name"] in moved else MATERIALIZE_AS[n["precision"]] for n in plan["nodes"]}
    return materialize(model, precision, keep_io_types=keep_io_types)[0]


def assert_protected(tmp_path, build, moved_nodes, reason_part, **config):
    model, feeds = build()
    candidate, plan = run_stage(tmp_path, model, feeds, **config)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert plan["boundaries"]["checked"] and plan["boundaries"]["verified"]
    assert plan["boundaries"]["materialisations"] >= 1  # found on the materialised plan
    assert {e["node"] for e in plan["boundaries"]["kept_fp32"]} == set(moved_nodes)
    for name in moved_nodes:
        assert nodes[name]["precision"] == "fp32" and reason_part in nodes[name]["reason"], nodes[name]
        assert "beyond FP16's 65504" in nodes[name]["reason"]
    expected, got = emulated(model, candidate, feeds)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())
    _, naive = emulated(model, without_check(model, plan, config.get("keep_io_types", True)), feeds)
    assert not np.isfinite(naive).all(), "without the check the plan must overflow"
    return plan, candidate


def test_power_spectrum_feeding_log_keeps_log_fp32(tmp_path):
    plan, _ = assert_protected(tmp_path, power_spectrum, ["log"], "boundary: input tensor power")
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["power"]["reason"].startswith("activation range")  # the range rule, as before
    assert nodes["mel"]["precision"] == "fp16"  # Log's output is small: the MatMul stays fp16


def test_dequantised_accumulator_feeding_matmul_keeps_it_fp32(tmp_path):
    plan, _ = assert_protected(tmp_path, dequantised_accumulator, ["fc"], "boundary: input tensor deq")
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["fc_bias"]["precision"] == "fp16"


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # feeding ±2e5 to the naive fp16 input
def test_loud_graph_input_stays_fp32_without_keep_io_types(tmp_path):
    _, candidate = assert_protected(tmp_path, loud_input, ["normalise"], "boundary: graph input audio",
                                    keep_io_types=False)
    types = {v.name: v.type.tensor_type.elem_type for v in candidate.graph.input}
    assert types["audio"] == TensorProto.FLOAT
    assert next(v for v in candidate.graph.output if v.name == "y").type.tensor_type.elem_type == TensorProto.FLOAT16


def test_loud_graph_input_is_safe_with_keep_io_types(tmp_path):
    # The input keeps its FP32 type, so the boundary is a Cast to fp16 in front of normalise.
    model, feeds = loud_input()
    _, plan = run_stage(tmp_path, model, feeds)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["normalise"]["precision"] == "fp32"
    assert "boundary: input tensor audio" in nodes["normalise"]["reason"]


def test_large_weight_is_still_protected_by_the_constants_rule(tmp_path):
    model, feeds = large_weight()
    candidate, plan = run_stage(tmp_path, model, feeds)
    fc = next(n for n in plan["nodes"] if n["name"] == "fc")
    assert fc["precision"] == "fp32" and "constant w has |value| 1e+05 > 65504" in fc["reason"]
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2 * np.abs(expected).max())
    # Unprotected, the materialiser clips the weight to 65504 (reported): the output is wrong.
    naive, naive_plan = run_stage(tmp_path / "naive", model, feeds, auto={"constants": "off"})
    assert naive_plan["totals"]["saturated"]
    _, clipped = emulated(model, naive, feeds)
    assert np.abs(clipped - expected).max() > 0.1 * np.abs(expected).max()


def test_without_a_reference_run_the_plan_says_boundaries_were_not_checked(tmp_path):
    model, feeds = power_spectrum()
    _, plan = run_stage(tmp_path, model, feeds, auto={"max_abs": None})
    assert plan["boundaries"]["checked"] is False
    assert "NOT checked" in plan["boundaries"]["reason"]
    _, plan = run_stage(tmp_path / "bf16", model, feeds, default="bf16")
    assert plan["boundaries"] == {"checked": False, "reason": "bf16 has FP32's range: no stored tensor can overflow"}


def test_a_mask_overflowing_only_to_minus_inf_leaves_softmax_fp16(tmp_path):
    scores = helper.make_node("MatMul", ["q", "k"], ["scores"], name="scores")
    masked = helper.make_node("Add", ["scores", "mask"], ["masked"], name="add_mask")
    softmax = helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1)
    mask = np.zeros([4, 4], np.float32)
    mask[:, 3] = -1e9
    model = make_model([scores, masked, softmax], [value("q", [4, 8]), value("k", [8, 4])], [value("y", [4, 4])],
                       [numpy_helper.from_array(mask, "mask")])
    feeds = {"q": RNG.standard_normal([4, 8]).astype(np.float32), "k": RNG.standard_normal([8, 4]).astype(np.float32)}
    candidate, plan = run_stage(tmp_path, model, feeds)
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["add_mask"]["precision"] == "fp32"  # its output is beyond max_abs (range rule)
    assert nodes["softmax"]["precision"] == "fp16"
    assert [e["node"] for e in plan["boundaries"]["tolerated"]] == ["softmax"]
    assert plan["boundaries"]["materialisations"] == 0  # nothing else could overflow: no materialisation needed
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, atol=2e-3)
    # A positive overflow into Softmax is not tolerated.
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(-mask, "mask"))
    _, plan = run_stage(tmp_path / "positive", model, feeds)
    assert next(n for n in plan["nodes"] if n["name"] == "softmax")["precision"] == "fp32"


def test_a_moved_consumer_moves_its_own_out_of_range_readers(tmp_path):
    # max_abs above FP16's range: only the stored-tensor check protects. The graph input (±1e5) would be fp16
    # (keep_io_types=false): Relu moves, and so does Sqrt, which would read Relu's 1e5 output cast to fp16.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sqrt", ["r"], ["s"], name="sqrt"),
             helper.make_node("MatMul", ["s", "w"], ["y"], name="proj")]
    model = make_model(nodes, [value("x", [2, 8])], [value("y", [2, 4])], [_weight("w", [8, 4], 0.1)])
    feeds = {"x": np.linspace(-1e5, 1e5, 16, dtype=np.float32).reshape(2, 8)}
    candidate, plan = run_stage(tmp_path, model, feeds, keep_io_types=False, auto={"max_abs": 1e6})
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["relu"]["reason"].startswith("boundary: graph input x")
    assert nodes["sqrt"]["reason"].startswith("boundary: input tensor r")
    assert nodes["proj"]["precision"] == "fp16" and plan["boundaries"]["verified"]
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())


def test_an_fp16_output_beyond_range_is_caught_when_max_abs_allows_it(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "k"], ["big"], name="scale_up"),
             helper.make_node("Sqrt", ["big"], ["y"], name="sqrt")]
    model = make_model(nodes, [value("x", [2, 8])], [value("y", [2, 8])],
                       [numpy_helper.from_array(np.array(100.0, np.float32), "k")])
    feeds = {"x": np.linspace(1e2, 1e3, 16, dtype=np.float32).reshape(2, 8)}
    candidate, plan = run_stage(tmp_path, model, feeds, auto={"max_abs": 1e6})
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["scale_up"]["precision"] == "fp32"
    assert nodes["scale_up"]["reason"].startswith("stored tensor: output big of this node is")
    expected, got = emulated(model, candidate, feeds)
    np.testing.assert_allclose(got, expected, rtol=2e-2)


def test_a_user_rule_is_not_overridden_but_reported(tmp_path, caplog):
    model, feeds = power_spectrum()
    rules = {"log16": {"match": "exact", "pattern": "log", "precision": "fp16"}}
    _, plan = run_stage(tmp_path, model, feeds, rules=rules)
    assert next(n for n in plan["nodes"] if n["name"] == "log")["precision"] == "fp16"
    [entry] = plan["boundaries"]["not_moved"]
    assert entry["node"] == "log" and entry["tensor"] == "power" and "rule log16" in entry["why"]
    assert "will be inf in fp16" in caplog.text


def test_a_boundary_inside_an_if_branch_is_checked_too():
    """Regression: the stored-tensor check walked the main graph only. Inside an If branch, a Mul kept
    FP32 (its constant 1e5 does not fit FP16) handed 4e5 to an FP16 Log: cast to inf, every output inf."""
    from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
    from trtpipe.precision.plan.planner import plan_precision

    def branch(name, k):
        return helper.make_graph(
            [helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_p"], name=f"{name}_mul"),
             helper.make_node("Log", [f"{name}_p"], [f"{name}_o"], name=f"{name}_log")], name, [],
            [helper.make_tensor_value_info(f"{name}_o", TensorProto.FLOAT, [4])],
            [numpy_helper.from_array(np.full(4, k, np.float32), f"{name}_k")])

    model = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("a", 1e5), else_branch=branch("b", 1.0))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]), opset_imports=[helper.make_opsetid("", 17)])
    name_nodes_as_parser_does(model)
    feeds = {"x": np.array([1, 2, 3, 4], np.float32), "c": np.array(True)}
    notes: dict = {}
    decisions, _ = plan_precision(network_from_model(model), precision_config(), [feeds], notes)
    log = decisions["if/then_branch/a_log"]
    assert log.precision == "fp32" and log.reason.startswith("boundary: input tensor a_p")
    assert decisions["if/else_branch/b_log"].precision == "fp16"  # nothing out of range there
    assert [entry["node"] for entry in notes["boundaries"]["kept_fp32"]] == ["if/then_branch/a_log"]
    mixed, _ = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()})
    onnx.checker.check_model(mixed, full_check=True)
    emulated = EmulatedRunner(mixed).run(feeds)["y"]
    np.testing.assert_allclose(emulated, ReferenceRunner(model).run(feeds)["y"], rtol=1e-3)
