"""Automatic rules: constants, activation range, normalization groups, authored islands, smoothing."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.models import data_block, precision_config, prepared
from trtpipe.data import sample_feeds
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision


def plan(model: onnx.ModelProto, feeds=None, **config):
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions, _ = plan_precision(net, precision_config(**config), feeds)
    return net, decisions


def builtin_plan(name: str, fuse: bool = True, **config):
    model = prepared(name, fuse)
    return plan(model, sample_feeds(model, data_block(name)), **config)


def test_mask_constant_keeps_its_consumer_fp32():
    _, decisions = builtin_plan("transformer", auto={"max_abs": None, "normalization": False})
    mask_consumers = [n for n, d in decisions.items() if "3.4e+38" in d.reason]
    assert mask_consumers, "the -3.4e38 mask constant must keep its consumer FP32"
    assert all(decisions[n].precision == "fp32" for n in mask_consumers)


def test_saturate_leaves_the_constant_to_the_materialiser():
    _, decisions = builtin_plan("transformer", auto={"max_abs": None, "normalization": False, "constants": "saturate"})
    assert not [n for n, d in decisions.items() if "3.4e+38" in d.reason]


def test_flushing_epsilon_keeps_its_consumer_fp32():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    eps = numpy_helper.from_array(np.array(1e-12, np.float32), "eps")
    nodes = [helper.make_node("Add", ["x", "eps"], ["s"], name="add_eps"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [eps]),
                              opset_imports=[helper.make_opsetid("", 17)])
    _, decisions = plan(model, auto={"max_abs": None})
    assert decisions["add_eps"].precision == "fp32" and "flushes to 0" in decisions["add_eps"].reason
    assert decisions["relu"].precision == "fp16"


def test_activation_range_records_the_observed_magnitude():
    _, decisions = builtin_plan("transformer", fuse=False, auto={"normalization": False})
    pow_node = decisions["/encoder/layer.0/attention/output/LayerNorm/Pow"]
    assert pow_node.precision == "fp32" and pow_node.reason.startswith("activation range")
    assert pow_node.observed_max_abs > 65504
    matmul = decisions["/encoder/layer.0/attention/self/query/MatMul"]
    assert matmul.precision == "fp16" and matmul.observed_max_abs < 4096


def test_fused_layernorm_counts_its_hidden_variance():
    _, decisions = builtin_plan("transformer", fuse=True, auto={"normalization": False})
    ln = decisions["/encoder/layer.0/attention/output/LayerNorm/LayerNormalization"]
    assert ln.precision == "fp32" and ln.observed_max_abs > 65504  # (x - mean)^2, not the output


def test_max_abs_null_disables_the_range_rule():
    _, decisions = builtin_plan("transformer", fuse=False, auto={"max_abs": None, "normalization": False,
                                                                  "constants": "off"})
    assert not [d for d in decisions.values() if d.source == "auto"]


def test_layernorm2d_group_is_kept_fp32_as_one_unit():
    # NAFNet's LayerNorm2d (axis 1) is not fused; the decomposed group is found anyway.
    _, decisions = builtin_plan("nafnet", auto={"max_abs": None, "constants": "off"})
    group = [n for n in decisions if n.startswith("/encoders.0/encoders.0.0/norm1/")]
    ops = sorted(n.rsplit("/", 1)[1] for n in group)
    assert {"ReduceMean", "Sub", "Pow", "ReduceMean_1", "Add", "Sqrt", "Div"} <= set(ops), ops
    assert all(decisions[n].precision == "fp32" for n in group)
    assert all(decisions[n].reason.startswith("normalization group: decomposed LayerNorm") for n in group)


def test_softmax_group_is_optional():
    _, without = builtin_plan("transformer", auto={"max_abs": None, "constants": "off"})
    _, with_softmax = builtin_plan("transformer", auto={"max_abs": None, "constants": "off", "softmax": True})
    softmax = "/encoder/layer.0/attention/self/Softmax"
    assert (without[softmax].precision, with_softmax[softmax].precision) == ("fp16", "fp32")


def test_authored_islands_are_kept_and_the_rest_converted():
    model = prepared("mixed_precision")
    net, decisions = plan(model, auto={"max_abs": None})
    kept = {n for n, d in decisions.items() if d.source == "authored"}
    assert any("FP32 island between Cast" in decisions[n].reason for n in kept)
    assert decisions["/block0/norm/ReduceSum"].source == "authored"
    # The FP32 head after the author's last upcast runs to the output: untuned, so converted.
    assert decisions["/head/fc1/MatMul"].precision == "fp16"
    assert any("computes in low precision" in decisions[n].reason for n in kept)
    assert any(d.precision == "fp16" and d.source == "default" for d in decisions.values())
    casts = [n for n in net.names if net.op_type(n) == "Cast"]
    assert all(decisions[n].precision == "keep" for n in casts)


def test_smoothing_absorbs_a_small_island_between_fp32_nodes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="big"),
             helper.make_node("Relu", ["a"], ["b"], name="small"),
             helper.make_node("Exp", ["b"], ["y"], name="big2")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    rules = {"exps": {"match": "op_type", "pattern": "Exp", "precision": "fp32"}}
    _, plain = plan(model, rules=rules, auto={"max_abs": None})
    _, smoothed = plan(model, rules=rules, auto={"max_abs": None, "island_size": 1})
    assert plain["small"].precision == "fp16"
    assert smoothed["small"].precision == "fp32" and smoothed["small"].reason.startswith("smoothing")


def test_fp32_default_plans_no_low_precision():
    _, decisions = builtin_plan("transformer", default="fp32")
    assert {d.precision for d in decisions.values()} <= {"fp32", "keep", "none"}


def test_heavy_max_abs_is_the_limit_of_accumulating_ops_only():
    # Issue 21: a MatMul/Gemm/Conv accumulates in FP32 and stores only its output in FP16, so a
    # recipe may give it its own headroom; elementwise ops keep max_abs, and null keeps one limit.
    from trtpipe.precision.auto.auto_range import range_decisions

    observed = {"mm": 5000.0, "big_mm": 20000.0, "conv": 5000.0, "add": 5000.0, "lstm": 5000.0}
    ops = {"mm": "MatMul", "big_mm": "MatMul", "conv": "Conv", "add": "Add", "lstm": "LSTM"}
    assert set(range_decisions(observed, 4096.0)) == set(observed)
    assert set(range_decisions(observed, 4096.0, None, ops)) == set(observed)
    found = range_decisions(observed, 4096.0, 16384.0, ops)
    assert set(found) == {"big_mm", "add", "lstm"}
    assert found["big_mm"][0].endswith("> 16384 (precision.auto.heavy_max_abs)")
    assert found["add"][0].endswith("> 4096 (precision.auto.max_abs)")
