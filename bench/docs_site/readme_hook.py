"""mkdocs hook: the site's index is the README's first screen (install, demo, your own model).

`docs/index.md` holds the marker `<!-- README: first screen -->`; at build time it is replaced
by README.md from its start to its first `## What a run does` heading, so the README and the
site's front page are one text. Decisions:
- links into the manual are written `docs/<page>.md` in the README (they work on GitHub and from
  a checkout); in the site the same page is `<page>.md`, so that prefix is dropped;
- any other relative link (a README anchor, a file outside docs/) would be broken in the site:
  the build fails naming it rather than publishing a dead link (strict builds only catch links
  to missing pages, not these once rewritten);
- a missing marker fails the build too: an index without the README would silently diverge.
"""

from __future__ import annotations

import re
from pathlib import Path

MARKER = "<!-- README: first screen -->"
END_HEADING = "\n## What a run does"
_LINK = re.compile(r"\]\(([^)\s]+)")


class FirstScreenError(ValueError):
    pass


def first_screen(readme: str) -> str:
    """The README up to its first `## What a run does`, its links rewritten for the site."""
    end = readme.find(END_HEADING)
    if end < 0:
        raise FirstScreenError(f"README.md has no '{END_HEADING.strip()}' heading: the index's excerpt ends there")
    text = readme[:end].rstrip() + "\n"

    def rewrite(match: re.Match) -> str:
        target = match.group(1)
        if target.startswith(("http://", "https://")):
            return match.group(0)
        if target.startswith("docs/"):
            return "](" + target[len("docs/"):]
        raise FirstScreenError(f"README.md's first screen links '{target}', which is not a page of the site: "
                               f"link a page under docs/ (docs/<page>.md#<anchor>)")

    return _LINK.sub(rewrite, text)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    if page.file.src_uri != "index.md":
        return markdown
    if MARKER not in markdown:
        raise FirstScreenError(f"docs/index.md lacks the marker {MARKER!r} where the README's first screen goes")
    readme = Path(config.config_file_path).parent / "README.md"
    return markdown.replace(MARKER, first_screen(readme.read_text()))
