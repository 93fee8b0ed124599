"""The cheap arithmetic computing an FP32 LayerNorm's input joins FP32 (precision/auto/group_inputs.py).

Real residual networks, planned by `plan_precision`, materialised, run on the FP16 emulator.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import precision_config
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.plan.cast_reasons import casts_by_reason
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision

HIDDEN = 16
BLOCKS = 2
REGION = {"bias"} | {f"add{b}" for b in range(BLOCKS)} | {f"scale{b}" for b in range(BLOCKS)}  # the running sum


def _residual_network(stream_bias: float, branch_std: float):
    """x -> MatMul (+ a per-channel offset: the stream's mean) -> BLOCKS x [LayerNorm -> MatMul -> Mul(beta)
    -> Add to the stream] -> the stream is the output. As NAFNet and T5 blocks: the norm reads a running sum."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 1.0, (HIDDEN, HIDDEN)).astype(np.float32), "w_in"),
             numpy_helper.from_array(np.full(HIDDEN, stream_bias, np.float32), "bias_in"),
             numpy_helper.from_array(np.linspace(0.8, 1.2, HIDDEN).astype(np.float32), "gamma"),
             numpy_helper.from_array(np.linspace(-0.1, 0.1, HIDDEN).astype(np.float32), "beta_ln")]
    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["h_in"], name="mm_in"),
             helper.make_node("Add", ["h_in", "bias_in"], ["s0"], name="bias")]
    stream = "s0"
    for b in range(BLOCKS):
        inits += [numpy_helper.from_array(rng.normal(0, branch_std, (HIDDEN, HIDDEN)).astype(np.float32), f"w{b}"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.0, HIDDEN).astype(np.float32), f"beta{b}")]
        nodes += [helper.make_node("LayerNormalization", [stream, "gamma", "beta_ln"], [f"n{b}"], name=f"ln{b}",
                                   axis=-1),
                  helper.make_node("MatMul", [f"n{b}", f"w{b}"], [f"m{b}"], name=f"mm{b}"),
                  helper.make_node("Mul", [f"m{b}", f"beta{b}"], [f"c{b}"], name=f"scale{b}"),
                  helper.make_node("Add", [stream, f"c{b}"], [f"s{b + 1}"], name=f"add{b}")]
        stream = f"s{b + 1}"
    nodes.append(helper.make_node("Identity", [stream], ["y"], name="out"))
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    name_nodes_as_parser_does(model)
    return model


def _feeds(scale: float, seed: int, count: int):
    return [{"x": np.random.default_rng(seed + i).normal(0, scale, (8, HIDDEN)).astype(np.float32)}
            for i in range(count)]


def _plan(model, feeds):
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(auto={"fewest_casts": True}), feeds)
    return net, decisions


def _materialised(model, decisions):
    mixed, report = materialize(model, {n: MATERIALIZE_AS[d.precision] for n, d in decisions.items()})
    onnx.checker.check_model(mixed, full_check=True)
    return mixed, report


def _errors(model, mixed, feeds) -> np.ndarray:
    reference, emulated = ReferenceRunner(model), EmulatedRunner(mixed)
    errors = []
    for feed in feeds:
        want, got = (np.asarray(r.run(feed)["y"], np.float64) for r in (reference, emulated))
        errors.append(np.linalg.norm(got - want) / np.linalg.norm(want))
    return np.array(errors)


def test_the_running_sum_an_fp32_layernorm_reads_is_computed_fp32_and_the_error_drops():
    # Stream values ~300-1000: each LayerNorm's (x - E[x])^2 exceeds max_abs, so the groups are FP32 by range.
    model = _residual_network(stream_bias=300.0, branch_std=40.0)
    net, decisions = _plan(model, _feeds(100.0, seed=1, count=2))
    assert all(decisions[f"ln{b}"].precision == "fp32" for b in range(BLOCKS))
    joined = {n for n, d in decisions.items() if d.reason.startswith("normalization input")}
    assert joined == REGION, joined
    # Each node names the group and tensor it serves: add0 computes s1, which ln1 reads.
    assert "2^-11 * sqrt(E[x^2]/Var)" in decisions["add0"].reason
    assert "computes s1, read by the FP32 LayerNormalization ln1" in decisions["add0"].reason
    assert "computes s0, read by the FP32 LayerNormalization ln0" in decisions["bias"].reason
    # No heavy node moved: the FP16 FLOP share is what it was.
    assert all(decisions[n].precision == "fp16" for n in ("mm_in", "mm0", "mm1"))
    mixed, report = _materialised(model, decisions)
    charged = casts_by_reason(net, decisions, report["casts_added"].get("casts", []))
    assert charged.get("normalization input", 0) >= 1, charged

    # The same plan with the region back in FP16 (the plan before the rule): the stream is re-rounded at
    # every Add and each norm reads a rounded input. Paired over held-out inputs, the rule's error is lower.
    before = {n: d for n, d in decisions.items()}
    for name in REGION | {n for n, d in decisions.items() if d.reason.startswith("fewest Casts")}:
        before[name] = type(d := decisions[name])("fp16", "precision.default=fp16", "default", d.observed_max_abs)
    held_out = _feeds(100.0, seed=50, count=8)
    after_errors = _errors(model, mixed, held_out)
    before_errors = _errors(model, _materialised(model, before)[0], held_out)
    assert (after_errors < before_errors).all(), (after_errors, before_errors)
    assert np.median(after_errors / before_errors) < 0.8  # measured 0.68: the Adds no longer re-round the sum


def test_a_layernorm_that_stays_fp16_pulls_nothing_in():
    # A stream of units: the norms' statistics fit and their r = E[x^2]/Var is ~1, the groups stay FP16.
    model = _residual_network(stream_bias=0.0, branch_std=0.3)
    _, decisions = _plan(model, _feeds(1.0, seed=1, count=2))
    assert all(decisions[f"ln{b}"].precision == "fp16" for b in range(BLOCKS))
    assert not [n for n, d in decisions.items() if d.reason.startswith("normalization input")]
    assert all(decisions[n].precision == "fp16" for n in REGION)


def test_an_fp32_layernorm_whose_input_comes_from_a_heavy_node_moves_nothing():
    """x produced by MatMul: joining it would move FLOPs; the rule stops at heavy nodes."""
    model = _residual_network(stream_bias=300.0, branch_std=40.0)
    # Read ln0's input straight from the MatMul (no bias Add in between).
    ln0 = next(n for n in model.graph.node if n.name == "ln0")
    ln0.input[0] = "h_in"
    for node in model.graph.node:
        if node.name == "bias":
            node.input[1] = "bias_in"
    _, decisions = _plan(model, _feeds(100.0, seed=1, count=2))
    assert decisions["ln0"].precision == "fp32"
    assert decisions["mm_in"].precision == "fp16"
    assert not decisions["mm_in"].reason.startswith("normalization input")


def test_a_user_rule_wins_over_the_region():
    model = _residual_network(stream_bias=300.0, branch_std=40.0)
    net = network_from_model(model)
    config = precision_config(auto={"fewest_casts": True},
                              rules={"keep_add": {"match": "exact", "pattern": "add0", "precision": "fp16"}})
    decisions, _ = plan_precision(net, config, _feeds(100.0, seed=1, count=2))
    assert decisions["add0"].precision == "fp16" and decisions["add0"].source == "rule"
    # Decided after the rule: ln0's input s0 is still computed FP32; s1, written FP16 by the rule's add0, is
    # rounded anyway, so nothing joins for ln1 (scale0 and the rest of the stream behind add0 stay FP16).
    assert decisions["bias"].reason.startswith("normalization input")
    assert not [n for n in ("scale0", "scale1", "add1") if decisions[n].reason.startswith("normalization input")]


def test_on_the_builtin_nafnet_the_residual_stream_joins_and_the_error_drops():
    """NAFNet's LayerNorm2d groups are FP32 by range; three read the residual stream (Add)."""
    from tests.precision.models import data_block, prepared
    from trtpipe.data import sample_feeds
    from trtpipe.numerics.inputs import generate_inputs
    from trtpipe.models import BUILTIN_INPUT_SPECS

    model = prepared("nafnet")
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(auto={"fewest_casts": True}),
                                  sample_feeds(model, data_block("nafnet")))
    joined = {n for n, d in decisions.items() if d.reason.startswith("normalization input")}
    assert joined and {net.op_type(n) for n in joined} == {"Add", "Mul"}
    assert all(d.precision == "fp16" for n, d in decisions.items() if net.op_type(n) == "Conv")
    before = dict(decisions)
    for name in joined:
        before[name] = type(d := decisions[name])("fp16", "precision.default=fp16", "default", d.observed_max_abs)
    held_out = generate_inputs(model, BUILTIN_INPUT_SPECS["nafnet"], 4242, 8)
    reference = ReferenceRunner(model)
    errors = {}
    for label, plan in (("after", decisions), ("before", before)):
        emulated = EmulatedRunner(_materialised(model, plan)[0])
        errors[label] = np.array([
            np.linalg.norm(emulated.run(f)["restored"] - (want := reference.run(f)["restored"])) / np.linalg.norm(want)
            for f in held_out])
    # Measured with the benchmark (64 inputs, against AutoCast's defaults): 1.020 -> 0.999. Here, paired
    # against the same plan with the region FP16: 0.970-0.989 on each of the 8 held-out images.
    ratio = errors["after"] / errors["before"]
    assert (ratio < 1.0).all() and np.median(ratio) < 0.995, ratio


def _with_shape_ops(model, ops: list[str]):
    """Each LayerNorm reads its input through `ops` (shape-only, values unchanged), as exports that permute
    or reshape around norms (ConvNeXt, Swin)."""
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.array([8, HIDDEN], np.int64), "shape_2d"))
    nodes = []
    for node in list(graph.node):
        if node.op_type == "LayerNormalization":
            tensor = node.input[0]
            for i, op in enumerate(ops):
                extra = {"Reshape": dict(inputs=["shape_2d"]), "Transpose": dict(perm=[1, 0]),
                         "Flatten": dict(axis=1)}[op]
                inputs = [tensor] + extra.pop("inputs", [])
                out = f"{node.name}_{op.lower()}{i}_out"
                nodes.append(helper.make_node(op, inputs, [out], name=f"{node.name}_{op.lower()}{i}", **extra))
                tensor = out
            node.input[0] = tensor
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _region_fp16(decisions, names):
    before = dict(decisions)
    for name in names:
        before[name] = type(d := decisions[name])("fp16", "precision.default=fp16", "default", d.observed_max_abs)
    return before


@pytest.mark.parametrize("ops", [["Reshape"], ["Transpose", "Transpose"], ["Flatten"]])
def test_shape_only_nodes_between_the_stream_and_the_norm_are_walked_through(ops):
    model = _with_shape_ops(_residual_network(stream_bias=300.0, branch_std=40.0), ops)
    net, decisions = _plan(model, _feeds(100.0, seed=1, count=2))
    assert all(decisions[f"ln{b}"].precision == "fp32" for b in range(BLOCKS))
    shape_nodes = {n for n in net.names if net.op_type(n) in set(ops)}
    joined = {n for n, d in decisions.items() if d.reason.startswith("normalization input")}
    # The shape-only nodes sit between FP32 nodes: FP32 costs them no Cast, FP16 two and a rounding of x.
    assert joined == REGION | shape_nodes, joined
    assert all("shape-only between FP32 nodes" in decisions[n].reason for n in shape_nodes)
    assert all(decisions[n].precision == "fp16" for n in ("mm_in", "mm0", "mm1"))
    mixed, _ = _materialised(model, decisions)
    held_out = _feeds(100.0, seed=50, count=8)
    after_errors = _errors(model, mixed, held_out)
    before_errors = _errors(model, _materialised(model, _region_fp16(decisions, joined))[0], held_out)
    assert (after_errors < before_errors).all(), (after_errors, before_errors)


def test_a_shape_only_node_reading_a_heavy_node_is_left_to_fewest_casts():
    """MatMul -> Reshape -> FP32 norm: FP32 or FP16, the Reshape costs one Cast; this rule does not move it."""
    model = _with_shape_ops(_residual_network(stream_bias=300.0, branch_std=40.0), ["Reshape"])
    ln0 = next(n for n in model.graph.node if n.name == "ln0")
    reshape = next(n for n in model.graph.node if n.name == "ln0_reshape0")
    reshape.input[0] = "h_in"
    ln0.input[0] = reshape.output[0]
    _, decisions = _plan(model, _feeds(100.0, seed=1, count=2))
    assert decisions["ln0"].precision == "fp32"
    assert not decisions["ln0_reshape0"].reason.startswith("normalization input")
    assert decisions["mm_in"].precision == "fp16"


def test_a_rule_setting_the_norms_fp16_leaves_no_region_behind():
    """The region follows its group's final precision: with the norms FP16 by a user rule, x is rounded anyway
    and FP32 arithmetic around it would only cost Casts."""
    model = _residual_network(stream_bias=300.0, branch_std=40.0)
    net = network_from_model(model)
    config = precision_config(auto={"fewest_casts": True},
                              rules={"ln16": {"match": "op_type", "pattern": "LayerNormalization", "precision": "fp16"}})
    decisions, _ = plan_precision(net, config, _feeds(100.0, seed=1, count=2))
    assert all(decisions[f"ln{b}"].precision == "fp16" for b in range(BLOCKS))
    assert not [n for n, d in decisions.items() if d.reason.startswith("normalization input")]
    assert all(decisions[n].precision == "fp16" for n in REGION)
    _, report = _materialised(model, decisions)
    # Only the Casts of the graph's input and output (kept FP32: keep_io_types), none around the stream.
    assert {c["tensor"] for c in report["casts_added"].get("casts", [])} <= {"x", "y"}, report["casts_added"]


def test_the_walk_continues_through_arithmetic_already_fp32():
    """A stream beyond max_abs: its Adds are FP32 by range; the branch scales next to them join, at no Cast."""
    model = _residual_network(stream_bias=6000.0, branch_std=40.0)
    net, decisions = _plan(model, _feeds(100.0, seed=1, count=2))
    assert all(decisions[n].reason.startswith("activation range") for n in ("bias", "add0", "add1"))
    joined = {n for n, d in decisions.items() if d.reason.startswith("normalization input")}
    assert joined == {"scale0", "scale1"}, joined
    assert "computes c0, which reaches s1 read by the FP32 LayerNormalization ln1" in decisions["scale0"].reason
    mixed, report = _materialised(model, decisions)
    before = _region_fp16(decisions, joined)
    before_mixed, before_report = _materialised(model, before)
    assert len(report["casts_added"].get("casts", [])) <= len(before_report["casts_added"].get("casts", []))
    held_out = _feeds(100.0, seed=50, count=8)
    ratio = _errors(model, mixed, held_out) / _errors(model, before_mixed, held_out)
    assert np.median(ratio) <= 1.0, ratio


def test_with_bf16_the_reason_uses_bf16_rounding():
    model = _residual_network(stream_bias=300.0, branch_std=40.0)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(default="bf16", auto={"fewest_casts": True}),
                                  _feeds(100.0, seed=1, count=2))
    joined = {n for n, d in decisions.items() if d.reason.startswith("normalization input")}
    assert joined == REGION, joined
    for name in joined:
        assert "to BF16" in decisions[name].reason and "2^-8 * sqrt" in decisions[name].reason, decisions[name].reason
        assert "FP16" not in decisions[name].reason and "2^-11" not in decisions[name].reason
    assert f"up to {2.0**-8:.3g} relative RMS" in decisions["bias"].reason
    assert "computes s1, read by the FP32 LayerNormalization ln1" in decisions["add0"].reason
    assert "reads s1 as the FP32 LayerNormalization ln1 does" in decisions["add1"].reason
