"""The `verify` fuzz kind, bounded (issue 32): hostile manifests and run directories given to
trtpipe-verify are never `identical`, end in one line (exit 2) or a drifted verdict, and raise
nothing else. Mutations and property: bench/fuzz/fuzz_verify.py (`python -m bench.fuzz --kind
verify` runs them longer)."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("hypothesis", reason="pip install -e '.[test]' (the fuzz tests need Hypothesis)")

from hypothesis import given, settings  # noqa: E402  (after the importorskip)

from bench.fuzz import fuzz_verify as fv  # noqa: E402
from tests.fuzz.bounded import BOUNDED  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return fv.recorded_run(tmp_path_factory.mktemp("verify-base"))


def test_the_recorded_run_unchanged_verifies_identical(recorded, fresh_dir):
    """The property is not vacuous: without a mutation the same copy is `identical`."""
    from trtpipe.verify import verify

    copy = fresh_dir() / "run"
    shutil.copytree(recorded, copy, symlinks=True)
    assert verify(copy)["identical"]


@pytest.mark.parametrize("mutation", fv.MUTATIONS)
def test_a_hostile_manifest_or_run_directory_is_never_identical(recorded, fresh_dir, mutation):
    @settings(BOUNDED, max_examples=3)
    @given(fv.cases())
    def case(drawn):
        drawn = {**drawn, "mutation": mutation}
        assert fv.check_verify(drawn, fresh_dir()) is None, drawn
    case()
