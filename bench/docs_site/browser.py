"""The built site in a real browser: every page from file://, the navigation followed, nothing broken.

`python -m bench.docs_site.browser SITE_DIR [--screenshots DIR]` (tests/test_docs_browser.py runs
`check_site`): headless Chromium (cdp_pipe.py) opens `index.html` from disk, then every page its
links reach, breadth first, and fails on
- a script error: an uncaught exception, or `console.error`;
- a resource that did not load (an image, script or stylesheet: a network failure, a missing file);
- a broken image: an `<img>` loaded with no pixels (`naturalWidth` 0);
- a broken link: a link to a file of the site that does not exist, or to an anchor its page lacks;
- a page of the site no link reaches (the navigation must lead everywhere);
- a link to the web in an asset tag (a CDN: the site must work offline);
- a search (`search=`) that finds nothing: the search index must load from file:// too.
Links to the web in the text are counted, not followed (no network here, and not the site's fault).
Decision: the page's facts (images, links, ids) are read by one `Runtime.evaluate` after the load
event and a short quiet period (Material starts its search worker after load, and errors there
count); a missing anchor is checked against the ids of the target page's own DOM, as loaded.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from bench.docs_site.cdp_pipe import Chromium, find_chromium

PAGE_FACTS = """JSON.stringify({
  title: document.title,
  ids: Array.from(document.querySelectorAll('[id]'), e => e.id),
  images: Array.from(document.images, i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0})),
  links: Array.from(document.querySelectorAll('a[href]'), a => ({href: a.href,
    nav: !!a.closest('nav, .md-nav, .md-header, .md-footer')})),
  assets: Array.from(document.querySelectorAll('script[src], link[rel=stylesheet][href], link[rel=icon][href]'),
    e => e.src || e.href),
})"""
QUIET_S = 0.3  # after the load event: late errors of scripts started on load
# Types a query into Material's search box and waits (up to 5 s) for results: the search index and
# its worker must load from file:// too (Material's offline plugin), not only the pages.
SEARCH = """(async () => {
  const box = document.querySelector('input.md-search__input');
  if (!box) return -1;
  box.focus(); box.value = %s;
  box.dispatchEvent(new Event('input', {bubbles: true}));
  box.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true}));
  for (let k = 0; k < 50; k++) {
    await new Promise(done => setTimeout(done, 100));
    const found = document.querySelectorAll('.md-search-result__item').length;
    if (found) return found;
  }
  return 0;
})()"""


@dataclass
class SiteReport:
    pages: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    nav_links: int = 0
    search_results: int | None = None
    web_links: int = 0
    seconds: float = 0.0


def _as_path(url: str) -> tuple[Path, str]:
    parsed = urllib.parse.urlparse(url)
    return Path(urllib.parse.unquote(parsed.path)), urllib.parse.unquote(parsed.fragment)


def _problems_of(events: list[dict], page: str) -> list[str]:
    problems, urls = [], {}
    for event in events:
        method, params = event["method"], event.get("params", {})
        if method == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            problems.append(f"{page}: could not load {urls.get(params['requestId'], '?')}: {params.get('errorText')}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            problems.append(f"{page}: script error: {text.splitlines()[0] if text else details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            problems.append(f"{page}: console.error: {text[:300]}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            problems.append(f"{page}: {entry.get('source')} error: {entry.get('text')} {entry.get('url', '')}".strip())
    return problems


def _photograph(browser: Chromium, site: Path, shots: tuple[str, ...], folder: Path) -> None:
    """A viewport-sized PNG of each `page.html[#anchor]` in `shots` (scrolled to the anchor)."""
    folder.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        page, _, anchor = shot.partition("#")
        events: list[dict] = []
        browser.send("Page.navigate", url=(site / page).as_uri() + (f"#{anchor}" if anchor else ""))
        browser.wait_for("Page.loadEventFired", 20, events)
        browser.drain(events, QUIET_S)
        data = browser.send("Page.captureScreenshot", format="png")["data"]
        (folder / (Path(page).stem + (f"-{anchor}" if anchor else "") + ".png")).write_bytes(base64.b64decode(data))


def _search(browser: Chromium, site: Path, query: str, report: SiteReport) -> None:
    events: list[dict] = []
    browser.send("Page.navigate", url=(site / "index.html").as_uri())
    browser.wait_for("Page.loadEventFired", 20, events)
    found = browser.send("Runtime.evaluate", expression=SEARCH % json.dumps(query), awaitPromise=True,
                         returnByValue=True, timeout=30)["result"]["value"]
    browser.drain(events, QUIET_S)
    report.problems += _problems_of(events, "index.html (search)")
    report.search_results = found
    if found == -1:
        report.problems.append("index.html: no search box")
    elif found == 0:
        report.problems.append(f"index.html: searching {query!r} finds nothing (the search index did not load?)")


def check_site(site: Path, *, chromium: str | None = None, screenshots: Path | None = None,
               shots: tuple[str, ...] = (), search: str | None = None) -> SiteReport:
    """Open every page of the built site in `site`; what was checked and what is broken.
    `search`: a query that must find something in the site's search box (None: not tried)."""
    site = site.resolve()
    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium, or set TRTPIPE_CHROMIUM)")
    report, started = SiteReport(), time.monotonic()
    facts_of: dict[Path, dict] = {}
    links: list[tuple[str, str]] = []  # (page, href)
    queue = deque([site / "index.html"])
    seen = {site / "index.html"}
    with Chromium(binary) as browser:
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable")
        while queue:
            path = queue.popleft()
            name = path.relative_to(site).as_posix()
            events: list[dict] = []
            browser.send("Page.navigate", url=path.as_uri())
            browser.wait_for("Page.loadEventFired", 20, events)
            browser.drain(events, QUIET_S)
            report.problems += _problems_of(events, name)
            value = browser.send("Runtime.evaluate", expression=PAGE_FACTS, returnByValue=True)["result"]["value"]
            facts = json.loads(value)
            facts_of[path] = facts
            report.pages.append(name)
            report.problems += [f"{name}: broken image {i['src']}" for i in facts["images"] if not i["ok"]]
            report.problems += [f"{name}: loads {a} from the web (the site must work offline)"
                                for a in facts["assets"] if a.startswith(("http:", "https:"))]
            for link in facts["links"]:
                href = link["href"]
                report.nav_links += link["nav"]
                if href.startswith(("http:", "https:")):
                    report.web_links += 1
                    continue
                if not href.startswith("file:"):
                    continue  # mailto:, javascript: and the like
                links.append((name, href))
                target, _ = _as_path(href)
                if target.suffix == ".html" and target.is_file() and site in target.parents and target not in seen:
                    seen.add(target)
                    queue.append(target)
        if search is not None:
            _search(browser, site, search, report)
        if screenshots is not None:
            _photograph(browser, site, shots, screenshots)
    for page, href in links:
        target, anchor = _as_path(href)
        if target.is_dir():
            report.problems.append(f"{page}: link {href} opens a directory listing, not a page")
        elif not target.exists():
            report.problems.append(f"{page}: broken link {href}")
        elif anchor and target in facts_of and anchor not in facts_of[target]["ids"]:
            report.problems.append(f"{page}: broken link {href}: no #{anchor} on {target.name}")
    unreached = sorted(p.relative_to(site).as_posix() for p in site.glob("*.html")
                       if p not in seen and p.name != "404.html")
    report.problems += [f"{page}: no link of the site leads to it" for page in unreached]
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docs_site.browser", description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="a built site (mkdocs build -d SITE)")
    parser.add_argument("--search", default="LayerNorm", help="a query the search box must find (default %(default)s)")
    parser.add_argument("--screenshots", type=Path, help="write screenshots of --shoot pages here")
    parser.add_argument("--shoot", default="index.html,how-it-works.html#stages,validation.html#the-picture,"
                        "precision.html#the-plan-drawn", help="pages to photograph, page.html[#anchor], comma-separated")
    args = parser.parse_args(argv)
    report = check_site(args.site, screenshots=args.screenshots, shots=tuple(args.shoot.split(",")),
                        search=args.search or None)
    for problem in report.problems:
        print(problem)
    print(f"{len(report.pages)} pages, {report.nav_links} navigation links, {report.web_links} links to the web "
          f"(not followed), {report.search_results} search results for {args.search!r}, {len(report.problems)} problems, {report.seconds:.1f} s")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
