"""The FLOP share uses the shapes the sample data has, and counts body compute per iteration."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.precision.graphs import make_model, weight
from tests.precision.models import precision_config
from tests.precision.subgraph_graphs import feeds_for, if_matmul, loop_carried, scan_rnn
from trtpipe.precision.network.flop_shapes import record_feed_shapes
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.plan_document import totals
from trtpipe.precision.plan.planner import plan_precision

F = TensorProto.FLOAT


def dynamic_batch_model(width=16):
    """A per-token projection whose FLOPs scale with the dynamic batch, and a fixed-size one."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y1"], name="per_token"),
             helper.make_node("MatMul", ["z", "w2"], ["y2"], name="fixed")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", width]),
                              helper.make_tensor_value_info("z", F, [4, width])],
                      [helper.make_tensor_value_info("y1", F, ["batch", "seq", width]),
                       helper.make_tensor_value_info("y2", F, [4, width])],
                      [weight("w1", [width, width]), weight("w2", [width, width])])


def share(model, feeds, *, measured: bool, **config):
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    if not measured:
        record_feed_shapes(net, feeds)
    config.setdefault("auto", {"max_abs": 1e4 if measured else None})
    decisions, _ = plan_precision(net, precision_config(**config), [feeds] if measured else None)
    return totals(net, decisions, {"casts_added": {"count": 0}, "casts": {"once": 0, "per_step": {}}})


@pytest.mark.parametrize("measured", [True, False])
def test_dynamic_dims_take_the_sample_shapes_not_1(measured):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 16, 16)).astype(np.float32),
             "z": rng.standard_normal((4, 16)).astype(np.float32)}
    fixed_fp32 = {"fixed": {"match": "exact", "pattern": "fixed", "precision": "fp32"}}
    result = share(dynamic_batch_model(), feeds, measured=measured, rules=fixed_fp32)
    per_token, fixed = 2 * 8 * 16 * 16 * 16, 2 * 4 * 16 * 16
    assert result["flops"] == {"total": per_token + fixed, "low_precision": per_token, "nodes_with_unknown_dims": 0}
    # With unknown dims taken as 1 the figure was 2*16*16 / (2*16*16 + fixed) = 0.2.
    assert result["low_precision_flop_share"] == pytest.approx(per_token / (per_token + fixed), abs=1e-6)


def test_without_sample_data_unknown_dims_are_reported():
    result = share(dynamic_batch_model(), None, measured=False)
    assert result["flops"]["nodes_with_unknown_dims"] == 1


@pytest.mark.parametrize("measured", [True, False])
def test_loop_body_flops_count_every_iteration(measured):
    model = loop_carried(trips=3)
    result = share(model, feeds_for(model), measured=measured)
    assert result["flops"]["total"] == 3 * 2 * 1 * 4 * 4


@pytest.mark.parametrize("measured", [True, False])
def test_scan_body_flops_follow_the_sample_sequence_length(measured):
    model = scan_rnn(inputs=3, width=4)
    result = share(model, feeds_for(model, sizes={"seq": 5}), measured=measured)
    assert result["flops"]["total"] == 5 * (2 * 4 * 3 + 2 * 4 * 4)
    assert result["flops"]["nodes_with_unknown_dims"] == 0


def test_an_if_branch_the_sample_does_not_take_costs_nothing_in_the_measured_run():
    model = if_matmul(width=8)
    feeds = feeds_for(model, sizes={"batch": 3})
    result = share(model, feeds, measured=True)
    pre, then_mm = 2 * 3 * 8 * 8, 2 * 3 * 4 * 8
    assert result["flops"]["total"] == pre + then_mm
