"""The Fix that installs one of trtpipe's extras names the extra's own requirements (trtpipe/errors.py:
pip_install_extra): trtpipe is not on the package index, so `pip install 'trtpipe[EXTRA]'` cannot work."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from trtpipe.config.check import LAUNCHER_EXTRAS, _missing_launcher
from trtpipe.errors import pip_install_extra

EXTRAS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("extra", ["remote", "ray", "joblib", "submitit"])
def test_the_fix_installs_the_extras_requirements_as_pyproject_pins_them(extra):
    words = shlex.split(pip_install_extra(extra))
    assert words[:2] == ["pip", "install"] and "trtpipe" not in " ".join(words)
    assert sorted(words[2:]) == sorted(requirement.replace(" ", "") for requirement in EXTRAS[extra])


@pytest.mark.parametrize("launcher", sorted(LAUNCHER_EXTRAS))
def test_a_missing_launcher_plugin_names_its_packages(launcher):
    error = _missing_launcher(f"In 'hydra/config': Could not find 'hydra/launcher/{launcher}'")
    assert error is not None and f"hydra/launcher={launcher}" in str(error)
    assert error.fix == pip_install_extra(LAUNCHER_EXTRAS[launcher]) and "trtpipe[" not in error.fix
