"""Text from a model (node, output and file names) made safe for a console line or a markdown cell.

Names are data (issue 32, item 6): an exporter, or a hostile file, may put a newline, a
carriage return or a terminal escape sequence (clear screen, colours, a window title) in a
node or output name, and printed raw they split a table row, rewrite the console or end
up cut in half by a column's truncation. Every writer that prints such text passes it
through `safe_text`: the console's formatter (runner/console.py) and `UserError` lines as a
net, the verdict table, the failure line, the stage lines and the sweep's `summary.md`.

Decisions:
- Every character that is not printable (`str.isprintable`: controls, line and paragraph
  separators, format characters, lone surrogates) is written as its Python escape (`\\x1b`,
  `\\n`, `\\u2028`), which says what is there; `validation.json` keeps the name exactly.
- A backslash stays as it is: the result is printable, so `safe_text` changes nothing the
  second time (a line escaped where a name is shown passes the console's net unchanged),
  and paths and regexes in a Fix stay pasteable. The cost: a name holding the four
  characters `\\x1b` reads like one holding ESC.
- `markdown=True` also writes `|` as `\\|`, so a name cannot add a cell to a table row.
- Shortening (a table column) comes after escaping, so a cut never splits an escape
  sequence the terminal would act on.

The bottom layer: it imports nothing of trtpipe's.
"""

from __future__ import annotations


def safe_text(text: object, *, markdown: bool = False) -> str:
    """`text` with every non-printable character as its escape (and `|` as `\\|` with `markdown`)."""
    text = str(text)
    if text.isprintable() and not (markdown and "|" in text):
        return text
    shown = []
    for character in text:
        if character == "|" and markdown:
            shown.append("\\|")
        elif character.isprintable():
            shown.append(character)
        else:
            shown.append(character.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(shown)
