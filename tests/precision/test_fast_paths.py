"""The precision stage's fast paths give what the plain paths give, on real graphs.

Each fast path (materialize_reuse.py, the node-types cache, batched_threads.py, the
reference run reusing the network's shape inference, the reference extremes) is
compared with the computation it replaces: bytes of models, every decided type,
every observed value. bench/same_output/same_output_precision.py checks the whole stage against main's code
on the built-in models, the benchmark encoders and the wild corpus.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.precision.models import data_block, precision_config, prepared
from trtpipe.data import sample_feeds
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.precision.auto import auto_range
from trtpipe.precision.materialize import node_types
from trtpipe.precision.network.batched_threads import map_in_batches
from trtpipe.precision.network.decisions import MATERIALIZE_AS
from trtpipe.precision.network.element_types import VALID_PRECISIONS
from trtpipe.precision.materialize.materialize import authored_element_types, materialize
from trtpipe.precision.materialize.materialize_reuse import materialize_or_reuse
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.precision.plan.planner import plan_precision
from trtpipe.precision.materialize.type_rules import opset_versions


def _planned(name: str, **config):
    model = prepared(name)
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    config = {**precision_config(**config), "data": data_block(name)}
    decisions, _ = plan_precision(net, config, sample_feeds(model, config["data"]), {})
    return model, net, {node: MATERIALIZE_AS[d.precision] for node, d in decisions.items()}


# transformer: the check materialises (its mask) and the plan stays: reused; t5: the check materialises
# (its GELU's x^3, tolerated: saturating_chains.py) and fewest Casts moves nothing after it: reused; nafnet:
# nothing beyond FP16's range, no check to reuse. A plan changed after the check: the test below.
@pytest.mark.parametrize("name, fewest_casts, reused", [("transformer", True, True), ("t5", True, True),
                                                        ("nafnet", True, False)])
def test_the_stage_materialisation_equals_a_fresh_one(name, fewest_casts, reused):
    model, net, plan = _planned(name, auto={"fewest_casts": fewest_casts, "island_size": 2})
    checked = net.last_materialised
    mixed, report = materialize_or_reuse(net, model, plan, True)
    fresh, fresh_report = materialize(model, plan, keep_io_types=True)
    assert mixed.SerializeToString() == fresh.SerializeToString()
    assert report == fresh_report
    assert net.last_materialised is None  # taken once, never held past the stage's call
    assert (checked is not None and mixed is checked.mixed) == reused  # the check's own result, not a copy


def test_a_changed_plan_or_io_setting_is_materialised_again():
    model, net, plan = _planned("transformer", auto={"fewest_casts": False})
    checked = net.last_materialised
    assert checked is not None, "the transformer's mask makes the stored-tensor check materialise"
    other = dict(plan)
    flipped = next(n for n, p in plan.items() if p == "fp16")
    other[flipped] = "fp32"
    mixed, _ = materialize_or_reuse(net, model, other, True)
    assert mixed is not checked.mixed
    assert mixed.SerializeToString() == materialize(model, other, keep_io_types=True)[0].SerializeToString()
    net.last_materialised = checked
    mixed, _ = materialize_or_reuse(net, model, plan, False)
    assert mixed is not checked.mixed


@pytest.mark.parametrize("name", ["transformer", "nafnet", "t5", "mixed_precision", "gpt2"])
def test_cached_node_types_equal_the_uncached_rules(name):
    model = prepared(name)
    name_nodes_as_parser_does(model)
    types, opsets = authored_element_types(model), opset_versions(model)
    decided: dict = {}
    for precision in VALID_PRECISIONS:
        for node in model.graph.node:
            cached = node_types.decide_node_types(node, precision, types, opsets, decided)
            again = node_types.decide_node_types(node, precision, types, opsets, decided)  # a hit
            plain = node_types._decide_node_types(node, precision, types, opsets)
            assert cached == plain and again == plain, (node.name, precision)
            cached.inputs.append(None)  # each caller's own lists: editing one changes no other
            assert node_types.decide_node_types(node, precision, types, opsets, decided) == plain
    assert len(decided) < len(model.graph.node) * len(VALID_PRECISIONS)  # hits happened


def test_batched_map_equals_map_in_order():
    rng = random.Random(0)
    for count in (0, 1, 2, 7, 100, 1000):
        items = [rng.randrange(10**6) for _ in range(count)]
        costs = {item: rng.choice([0, 1, 10, 10**6]) for item in items}
        assert map_in_batches(lambda x: x * 3 + 1, items, costs.__getitem__, 2) == [x * 3 + 1 for x in items]


def _masked_extremes(array):
    finite = array[np.isfinite(array)]
    return (np.inf, -np.inf) if not finite.size else (float(finite.min()), float(finite.max()))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_reference_extremes_equal_the_masked_computation(dtype):
    rng = np.random.default_rng(0)
    cases = [np.zeros(0), rng.standard_normal(50) * 1e4, np.array([np.nan]), np.array([np.inf, -np.inf]),
             np.array([1.0, np.nan, -3.0]), np.array([np.inf, 2.0]), np.array([-np.inf, -2.0, 5.0]),
             np.full((3, 4), 65504.0)]
    for values in cases:
        array = values.astype(dtype)
        assert auto_range._finite_extremes(array) == _masked_extremes(array)
        assert auto_range._is_floating(array.dtype) == np.issubdtype(array.dtype, np.floating)
    assert not auto_range._is_floating(np.dtype(np.int64))


def test_reference_run_with_the_networks_inference_gives_the_same_values():
    model = prepared("transformer")
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    feeds = sample_feeds(model, data_block("transformer"))[0]
    shared = ReferenceRunner(model, expose_intermediates=True, inferred=net.inferred).run(feeds)
    own = ReferenceRunner(model, expose_intermediates=True).run(feeds)
    assert list(shared) == list(own)
    for name, value in own.items():
        np.testing.assert_array_equal(shared[name], value)
