"""The user's install: a wheel built from the checkout runs every recipe from anywhere and
pulls no test dependency (issue 24: the user tool and the developers' install apart)."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_ONLY = {"pytest", "pytest-xdist", "import-linter", "hypothesis", "mkdocs", "mkdocs-material"}  # extras, never runtime


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built as `pip install .` builds it: in pip's isolated build environment (pyproject's build-system).
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, text=True, timeout=300)
    (found,) = out.glob("trtpipe-*.whl")
    return found


def test_the_wheel_requires_no_test_dependency(wheel):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(name))
    always = [req for req in metadata.get_all("Requires-Dist") if "extra ==" not in req]
    names = {req.split(";")[0].split("[")[0].replace(">", " ").replace("=", " ").replace("<", " ").split()[0].lower()
             for req in always}
    assert names and not names & TEST_ONLY, names
    assert {"onnx", "onnxruntime", "hydra-core"} <= names


def test_the_installed_wheel_runs_a_recipe_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "TRTPIPE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "trtpipe", "+recipe=transformer_fp16", "stages=[sanitize,precision]",
                           f"hydra.run.dir={work / 'run'}"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = subprocess.run([sys.executable, "-c", "import trtpipe; print(trtpipe.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=60)
    assert Path(probe.stdout.strip()).is_relative_to(target), probe.stdout
