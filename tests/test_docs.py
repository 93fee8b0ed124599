"""The front door and the manual: README stays short and its links and examples work; the docs
site (docs/, mkdocs.yml) builds in strict mode, so a broken page or link fails here, not later."""

from __future__ import annotations

import html
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


def build_site(site: Path) -> None:
    """`mkdocs build --strict` into `site`, from the checkout (as CI and a developer run it)."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.fail(f"mkdocs is not installed next to {sys.executable}: pip install '.[test]'")
    done = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(site)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("docs") / "site"
    build_site(site)
    return site


def test_the_docs_site_builds_strictly_with_a_page_file_per_page(site):
    pages = {p.stem for p in (REPO / "docs").glob("*.md")}
    built = {p.stem for p in site.glob("*.html")}
    assert pages <= built, pages - built
    # use_directory_urls: false, so links open pages from disk (file://), not a directory listing
    assert not list(site.glob("*/index.html")), "pages as folders: a link opened from disk lists a directory"


def _readme_code_lines(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_site_index_is_the_readme_first_screen(site):
    """The install, demo and your-own-model commands of the README are the index's, word for word."""
    first_screen = README[:README.index("## What a run does")]
    commands = _readme_code_lines(first_screen)
    assert len(commands) >= 6 and "pip install ." in commands and "trtpipe +recipe=transformer_fp16" in commands
    index = html.unescape(re.sub(r"<[^>]+>", "", (site / "index.html").read_text()))
    missing = [c for c in commands if c not in index]
    assert not missing, f"README commands missing from the site's index: {missing}"
    assert 'href="docs/' not in (site / "index.html").read_text(), "README links into docs/ point at the site's pages"


def test_no_page_loads_anything_from_the_network(site):
    """Offline and from file://: every script, stylesheet, image and font is in the site (no CDN)."""
    remote = re.compile(r'<(?:script|img|link|iframe|source)\b[^>]*\b(?:src|href)="((?:https?:)?//[^"]+)"')
    found = {(page.name, url) for page in site.rglob("*.html") for url in remote.findall(page.read_text())}
    css = {(sheet.name, url) for sheet in site.rglob("*.css")
           for url in re.findall(r"url\(['\"]?((?:https?:)?//[^)'\"]+)", sheet.read_text())}
    assert not found | css, sorted(found | css)


def test_the_readme_first_screen_refuses_a_link_the_site_cannot_follow():
    from bench.docs_site.readme_hook import FirstScreenError, first_screen

    text = "# t\n[gpu](docs/gpu.md#x) [web](https://example.org)\n## What a run does\n[late](#anchor)\n"
    assert first_screen(text) == "# t\n[gpu](gpu.md#x) [web](https://example.org)\n"
    with pytest.raises(FirstScreenError, match="links '#on-a-gpu-machine'"):
        first_screen("# t\nsee [On a GPU machine](#on-a-gpu-machine)\n## What a run does\n")
    with pytest.raises(FirstScreenError, match="has no '## What a run does'"):
        first_screen("# t\n")


def test_the_readme_rule_example_works_when_pasted(tmp_path):
    (rule,) = re.findall(r"`('\+precision\.rules\.[^`]+')`", README)
    done = subprocess.run(["bash", "-c", f"'{sys.executable}' -m trtpipe +recipe=transformer_fp16 {rule} "
                                         f"'stages=[sanitize,upgrade_opset,precision]' hydra.run.dir=run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "matches no node" not in done.stdout + done.stderr
