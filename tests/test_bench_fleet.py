"""bench/fleet's own logic, without running a fleet: every builder runs the same sweep in its own
order, and a stage's manifest record is counted as the hit or miss it was."""

from __future__ import annotations

import itertools

import pytest

from bench.fleet.builder import JOBS, SWEEP, sweep_overrides, where_from


def jobs_in_order(overrides: list[str]) -> list[tuple[str, ...]]:
    """The job order Hydra's basic launcher gives these sweep overrides (the product, first list outermost)."""
    lists = [[f"{o.split('=')[0]}={v}" for v in o.split("=", 1)[1].split(",")] for o in overrides]
    return list(itertools.product(*lists))


@pytest.mark.parametrize("count", [2, 3])
def test_every_builder_runs_the_same_jobs_in_its_own_order(count):
    orders = [jobs_in_order(sweep_overrides(i, count)) for i in range(count)]
    assert all(len(order) == JOBS and set(order) == set(orders[0]) for order in orders)
    assert len({order[0] for order in orders}) == count  # each starts elsewhere
    assert {name for name, _ in SWEEP} == {o.split("=")[0] for o in sweep_overrides(0, count)}


@pytest.mark.parametrize("stage, counted", [
    ({"status": "ran", "origin": "local", "reason": "no earlier entry"}, "miss"),
    ({"status": "cached", "origin": "local", "reason": None}, "local"),
    ({"status": "cached", "origin": "remote", "reason": None}, "remote"),
    ({"status": "deferred", "origin": "remote", "reason": None}, "remote"),
    ({"status": "deferred", "origin": "local", "reason": None}, "local"),  # a cached deferred build
    ({"status": "deferred", "origin": "local", "reason": "inputs.plan changed"}, "miss"),  # one that ran
])
def test_a_stage_is_counted_where_its_result_came_from(stage, counted):
    assert where_from(stage) == counted
