"""The result files the docs cite are written by the benchmarks (issue 24 item 1): the fuzzer's,
merged over the parts of a long run and read back from a finished run's printed summary."""

from __future__ import annotations

import json

import pytest

import bench.common.results as results
from bench.fuzz.fuzz import record_logs

LOG = """    case      10:0 ext_missing              ok
fs        cases   4500  defects   0  12000.5 s
    ext_missing              item 3         cases  122  defects    0
total     cases   4500  defects   0  12000.5 s (seed {seed})
sweep     cases    500  defects   1   4400.0 s
total     cases    500  defects   1   4400.0 s (seed {seed})
"""


@pytest.fixture
def bench_dir(tmp_path, monkeypatch):
    (tmp_path / "fuzz").mkdir()
    monkeypatch.setattr(results, "BENCH", tmp_path)
    return tmp_path


def test_parts_of_a_long_run_are_summed_and_a_provisional_file_is_replaced(bench_dir, tmp_path):
    results.write_results("fuzz", {"fs.cases": 74, "runs.fs.seed4.cases": 74}, command="(transcribed)",
                          converted_from="docs")
    for seed in (10, 11):
        (tmp_path / f"seed{seed}.log").write_text(LOG.format(seed=seed))
    record_logs([tmp_path / "seed10.log", tmp_path / "seed11.log"])
    figures = json.loads((bench_dir / "fuzz" / "results.json").read_text())["figures"]
    assert "runs.fs.seed4.cases" not in figures  # the transcribed figures are gone, not summed
    assert figures["fs.cases"] == 9000 and figures["sweep.cases"] == 1000 and figures["sweep.defects"] == 2
    assert figures["scenarios.cases"] == 10000 and figures["scenarios.defects"] == 2
    assert figures["fs.per_case_s"] == pytest.approx(24001 / 9000, abs=1e-3)
    record_logs([tmp_path / "seed10.log"])  # the same kind and seed again replaces, never double counts
    assert json.loads((bench_dir / "fuzz" / "results.json").read_text())["figures"]["fs.cases"] == 9000
