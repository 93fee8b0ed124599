"""Issue 33 item 2: the built manual in a real browser. Headless Chromium (Debian's `chromium`)
opens every page of `mkdocs build --strict`'s site from file://, follows the navigation and fails on
a broken image, a broken link, a script error or an asset from the web (bench/docs_site/browser.py).

Marked `docs_browser`: `pytest -m "not docs_browser"` leaves it out. Where no Chromium is installed
it skips saying so, except in CI (`CI` set), where .ci/run installs it and a skip would hide a
manual nobody checked: there it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.docs_site.browser import check_site
from bench.docs_site.cdp_pipe import find_chromium
from tests.test_docs import build_site

pytestmark = [pytest.mark.docs_browser, pytest.mark.slow]  # slow: a site build and a browser, ~20 s


@pytest.fixture(scope="module")
def chromium():
    found = find_chromium()
    if found is None:
        message = ("no Chromium: the docs' browser check needs Debian's `chromium` package "
                   "(apt-get install chromium; .ci/run installs it)")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + "; CI must run this check")
        pytest.skip(message)
    return found


def test_every_page_of_the_site_opens_from_disk_with_nothing_broken(chromium, tmp_path):
    site = tmp_path / "site"
    build_site(site)
    report = check_site(site, chromium=chromium, search="LayerNorm")
    assert not report.problems, "\n".join(report.problems)
    assert report.search_results > 0
    pages = {p.name for p in site.glob("*.html")} - {"404.html"}
    assert set(report.pages) == pages
    assert report.nav_links >= len(pages) ** 2, "every page shows the navigation to every page"
    print(f"{len(report.pages)} pages in {report.seconds:.1f} s")


def _page(body: str) -> str:
    return f"<!doctype html><html><head><title>t</title></head><body>{body}</body></html>"


def test_each_kind_of_breakage_is_reported(chromium, tmp_path):
    """The check can fail: a small site with one fault of each kind, each named in the report."""
    site = tmp_path / "site"
    (site / "img").mkdir(parents=True)
    (site / "folder").mkdir()
    # a real one-pixel PNG: a working image must not be reported
    (site / "img" / "ok.png").write_bytes(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"))
    (site / "index.html").write_text(_page(
        '<img src="img/ok.png"><img src="img/missing.png">'
        '<a href="page.html#here">fine</a> <a href="page.html#nowhere">anchor</a> <a href="gone.html">gone</a> '
        '<a href="folder/">folder</a> <a href="https://example.org/">web text link</a>'
        '<script>throw new Error("boom on load")</script>'
        '<script src="https://cdn.example.invalid/lib.js"></script>'))
    (site / "page.html").write_text(_page('<h2 id="here">here</h2><a href="index.html">back</a>'))
    (site / "orphan.html").write_text(_page("no link leads here"))
    report = check_site(site, chromium=chromium)
    text = "\n".join(report.problems)
    assert sorted(report.pages) == ["index.html", "page.html"]
    for expected in ("broken image file://", "missing.png", "boom on load", "#nowhere", "broken link file://",
                     "gone.html", "opens a directory listing", "loads https://cdn.example.invalid/lib.js",
                     "orphan.html: no link of the site leads to it"):
        assert expected in text, f"{expected!r} not reported:\n{text}"
    assert "ok.png" not in text and "#here" not in text and "example.org" not in text
    assert report.web_links == 1
