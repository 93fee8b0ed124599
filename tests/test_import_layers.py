"""Imports run downward (STYLE.md): import-linter checks the contracts in pyproject.toml.

Run here so that the README's test command (what CI runs) enforces the layers. The check
reads the checkout's sources (lint-imports puts the working directory first on the path).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _lint_imports() -> Path:
    script = Path(sys.executable).with_name("lint-imports")
    if not script.exists():
        pytest.fail(f"lint-imports is not installed next to {sys.executable}: pip install '.[test]'")
    return script


def test_every_import_layer_contract_is_kept():
    done = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "3 kept" in done.stdout, done.stdout[-2000:]


def test_no_package_folder_holds_more_than_fifteen_modules():
    crowded = {str(folder.relative_to(REPO)): n for folder in (REPO / "trtpipe").rglob("*")
               if folder.is_dir() and (n := len([m for m in folder.glob("*.py") if m.name != "__init__.py"])) > 15}
    assert not crowded, crowded


def test_every_sub_package_says_what_it_holds():
    silent = [str(init.relative_to(REPO)) for init in (REPO / "trtpipe").rglob("__init__.py")
              if not init.read_text().lstrip().startswith('"""')]
    assert not silent, silent
