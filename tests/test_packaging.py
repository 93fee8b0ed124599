"""The wheel ships every subpackage, conf/ and recipes/ (see pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "trtpipe").rglob("__init__.py")
    }
    assert on_disk <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_conf_and_recipes_are_found():
    from trtpipe.config.locate import conf_dir, recipe_dirs

    assert (conf_dir() / "config.yaml").is_file()
    assert (recipe_dirs()[0] / "transformer_fp16.yaml").is_file()


def test_importing_trtpipe_has_no_heavy_side_effects():
    import subprocess
    import sys

    code = "import sys, trtpipe, trtpipe.cli; print(any(m in sys.modules for m in ('onnx', 'hydra', 'tensorrt')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
