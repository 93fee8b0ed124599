"""The switched emulation computes, bit for bit, what each candidate's own emulated graph computes;
candidates it cannot map, and models it does not apply to, go the full way."""

from __future__ import annotations

import numpy as np
import pytest

from tests.precision.models import data_block, prepared
from trtpipe.data import sample_feeds
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.precision.auto.auto_constants import constant_decisions
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
from trtpipe.search.switched import SwitchedEmulation, why_not_switched


def _model(name: str, fuse: bool):
    model = prepared(name, fuse)
    name_nodes_as_parser_does(model)
    return model, sample_feeds(model, data_block(name))


@pytest.mark.parametrize("name, fuse", [("transformer", False), ("nafnet", False), ("t5", False)])
def test_switched_outputs_equal_the_candidates_own_emulation(name, fuse):
    model, feeds = _model(name, fuse)
    assert why_not_switched(model, "fp16", True) is None
    switched = SwitchedEmulation(model)
    guarded = constant_decisions(network_from_model(model), "fp16")  # as the search keeps them
    rng = np.random.RandomState(7)
    for fp32_fraction in (0.0, 0.2, 0.5, 0.9):
        plan = {node.name: "fp32" if node.name in guarded or rng.rand() < fp32_fraction else "fp16"
                for node in model.graph.node}
        candidate, report = materialize(model, plan)
        switches = switched.switches(candidate, report)
        assert switches is not None
        assert any(switches.values())  # some rounding happens in every one of these plans
        emulated = EmulatedRunner(candidate)
        for sample in feeds:
            mine, theirs = switched.run(sample, switches), emulated.run(sample)
            assert set(mine) == set(theirs)
            for output in mine:
                assert np.array_equal(mine[output], theirs[output], equal_nan=True), output


def test_a_saturated_weight_is_not_mapped():
    # Without the constants guard the FP32-min mask constant is clipped to -65504 in FP16, which
    # a Cast to FP16 (-inf) does not reproduce: such a candidate is left to the full emulation.
    model, _ = _model("transformer", False)
    candidate, report = materialize(model, {node.name: "fp16" for node in model.graph.node})
    assert report["saturated"] and SwitchedEmulation(model).switches(candidate, report) is None


def test_where_the_switched_emulation_does_not_apply():
    model, _ = _model("mixed_precision", True)
    assert "low-precision tensors as authored" in why_not_switched(model, "fp16", True)
    model, _ = _model("transformer", True)
    assert why_not_switched(model, "bf16", True) == "low precision is bf16"
    assert why_not_switched(model, "fp16", False) == "precision.keep_io_types is false"
