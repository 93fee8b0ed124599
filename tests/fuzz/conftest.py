"""Shared settings of the bounded fuzz run (issue 13, item 12): few examples, derandomized
(CI is reproducible), no deadline (a case may run the pipeline), no example database."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install -e '.[test]' (the fuzz tests need Hypothesis)")

BOUNDED = hypothesis.settings(deadline=None, derandomize=True, database=None,
                              suppress_health_check=list(hypothesis.HealthCheck))


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory):
    """A function giving a new empty directory per generated case (removed at module end)."""
    root = tmp_path_factory.mktemp("fuzz")
    yield lambda: Path(tempfile.mkdtemp(dir=root))
    shutil.rmtree(root, ignore_errors=True)
