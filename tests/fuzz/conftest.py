"""The bounded fuzz run's fixture: a new empty directory per generated case."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory):
    """A function giving a new empty directory per generated case (removed at module end)."""
    root = tmp_path_factory.mktemp("fuzz")
    yield lambda: Path(tempfile.mkdtemp(dir=root))
    shutil.rmtree(root, ignore_errors=True)
