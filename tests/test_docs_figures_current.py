"""Issue 33 item 2: the manual's pictures (docs/img/) are where a reader looks, small, and what
`python -m bench.docs_site` makes from real runs today, as figures are checked against their
results (tests/test_doc_figures.py).

The regeneration test runs the two real trtpipe runs (a few seconds each) and compares: the SVGs
byte for byte (written as text by our code), the PNGs pixel by pixel within a small tolerance (the
same drawing on another matplotlib or FreeType may move a few antialiased pixels; a changed plot,
model or verdict moves thousands), and the captions' numbers against bench/docs_site/results.json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.docs_site.figures import MAX_PNG_BYTES, PICTURES

REPO = Path(__file__).resolve().parent.parent
IMG = REPO / "docs" / "img"
PAGES = sorted((REPO / "docs").glob("*.md"))
FIX = "run `python -m bench.docs_site --record` and commit docs/img/ and bench/docs_site/results.json"


def _referenced() -> dict[str, list[str]]:
    refs: dict[str, list[str]] = {}
    for page in PAGES:
        for target in re.findall(r"!\[[^\]]*\]\((img/[^)\s]+)", page.read_text()):
            refs.setdefault(target, []).append(page.name)
    return refs


def test_every_picture_exists_is_small_and_is_shown_on_a_page():
    refs = _referenced()
    for name in PICTURES:
        path = IMG / name
        assert path.is_file(), f"docs/img/{name} is missing: {FIX}"
        if name.endswith(".png"):
            assert path.stat().st_size < MAX_PNG_BYTES, f"{name}: {path.stat().st_size} bytes"
        assert f"img/{name}" in refs, f"docs/img/{name} is on no page of docs/"
    missing = [target for target in refs if not (REPO / "docs" / target).is_file()]
    assert not missing, missing
    assert {"img/accuracy-failing.png", "img/accuracy-passing.png"} <= {
        t for t, pages in refs.items() if "validation.md" in pages}, "the accuracy pictures belong on Validation"


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs-img")
    code = ("import json, sys; from pathlib import Path; from bench.docs_site.figures import regenerate; "
            "print(json.dumps(regenerate(Path(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, json.loads(done.stdout.strip().splitlines()[-1])


def test_the_diagrams_are_what_the_script_draws_today(regenerated):
    out, _ = regenerated
    for name in PICTURES:
        if name.endswith(".svg"):
            assert (out / name).read_text() == (IMG / name).read_text(), f"docs/img/{name} is stale: {FIX}"


def test_the_accuracy_pictures_are_what_the_runs_draw_today(regenerated):
    out, _ = regenerated
    for name in PICTURES:
        if name.endswith(".png"):
            fresh, committed = _pixels(out / name), _pixels(IMG / name)
            assert fresh.shape == committed.shape, f"docs/img/{name}: size {committed.shape} -> {fresh.shape}: {FIX}"
            moved = float((np.abs(fresh - committed).max(axis=2) > 48).mean())
            assert moved < 0.002, f"docs/img/{name}: {moved:.2%} of the pixels differ: {FIX}"


def test_the_captions_numbers_are_the_runs(regenerated):
    _, figures = regenerated
    recorded = json.loads((REPO / "bench" / "docs_site" / "results.json").read_text())["figures"]
    assert set(figures) == set(recorded), FIX
    for key, value in figures.items():
        assert value == pytest.approx(recorded[key], rel=1e-3), f"{key}: {recorded[key]} -> {value}: {FIX}"
