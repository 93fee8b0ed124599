"""Mutated ONNX graphs through sanitize -> upgrade_opset -> precision -> validate (issue 13,
item 12): exit 0, 1 or 2 only, nothing written outside the run directory and the cache,
and the cache verifies afterwards. Strategy and property: bench/fuzz/fuzz_graphs.py."""

from __future__ import annotations

import onnx
import pytest

pytest.importorskip("hypothesis", reason="pip install -e '.[test]' (the fuzz tests need Hypothesis)")

from tests.fuzz.bounded import BOUNDED  # noqa: E402

from hypothesis import given, settings  # noqa: E402  (after the importorskip)

from bench.fuzz import fuzz_graphs as fg  # noqa: E402

# Whole pipeline runs over many models or trials: the full suite's tier, not the fast one.
pytestmark = pytest.mark.slow


def test_the_base_graph_runs_clean(fresh_dir):
    """Without mutations the pipeline succeeds: the failures the fuzzer accepts come from the mutations."""
    from trtpipe.api import run

    workdir = fresh_dir()
    path = workdir / "model.onnx"
    onnx.save(fg.base_model(), path)
    result = run([f"model.path={path}", fg.STAGES, f"cache.dir={workdir / 'cache'}"], run_dir=workdir / "run")
    assert result.exit_code == 0 and [s.name for s in result.stages][-1] == "validate"
    assert fg.check_graph(path.read_bytes(), fresh_dir()) is None


def test_mutated_graphs_end_in_0_1_or_2(fresh_dir):
    @settings(BOUNDED, max_examples=12)
    @given(fg.mutated_models())
    def case(model_bytes):
        assert fg.check_graph(model_bytes, fresh_dir()) is None
    case()
