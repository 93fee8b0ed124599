"""The front door and the manual: README stays short and its links and examples work; the docs
site (docs/, mkdocs.yml) builds in strict mode, so a broken page or link fails here, not later."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_the_readme_is_a_front_door_not_a_manual():
    assert len(README.encode()) <= 25 * 1024
    first_screen = README[:README.index("## What a run does")]
    assert "model.path=" in first_screen and "data.path=" in first_screen and "build.profiles" in first_screen


def test_every_local_link_of_the_readme_exists():
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", README) if not t.startswith(("#", "http"))]
    assert targets, "the README links to its manual"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, missing


def test_the_docs_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.fail(f"mkdocs is not installed next to {sys.executable}: pip install '.[test]'")
    done = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {p.stem for p in (REPO / "docs").glob("*.md")}
    built = {p.parent.name if p.parent != tmp_path / "site" else "index" for p in (tmp_path / "site").rglob("index.html")}
    assert pages <= built, pages - built


def test_the_readme_rule_example_works_when_pasted(tmp_path):
    (rule,) = re.findall(r"`('\+precision\.rules\.[^`]+')`", README)
    done = subprocess.run(["bash", "-c", f"'{sys.executable}' -m trtpipe +recipe=transformer_fp16 {rule} "
                                         f"'stages=[sanitize,upgrade_opset,precision]' hydra.run.dir=run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "matches no node" not in done.stdout + done.stderr
