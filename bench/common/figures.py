"""Check the figures README.md and docs/*.md quote against the result files they cite.

    python -m bench.common.figures            # list every problem; exit 1 if any
    python -m bench.common.figures --update   # first rewrite every cited number from its result

The rules (docs/figures.md states them for writers; tests/test_doc_figures.py runs this):

1. A measured figure is a Markdown link to the family's section of docs/figures.md whose
   title names the key in `bench/<family>/results.json`:
       [0.114 s](figures.md#autocast "transformer.trtpipe_s")      (README: docs/figures.md#...)
   The numbers of the link text must be the cited value rounded to the digits shown: each
   shown number x with d decimals (of its mantissa, for 1.5e-4) must satisfy
   |x - value| <= half a unit of its last digit. `1,060` is 1060; the unit (s, MB, %, x) is
   the one the result file stores the value in. A text with several numbers (`12 / 13`,
   `1.81-2.23 s`) cites a list of as many numbers, in order.
2. A console transcript is a fenced block followed, on the next line, by a citation whose text
   has no number and whose value is a string: the block must equal it, where `...` in the
   block stands for any text within a line and a line of only `...` for any lines (the docs
   elide long output).
3. Outside code (fenced blocks, `code spans`), link targets and headings, every number
   followed by a unit (UNITS below: s, ms, MB, GB, GiB, %, x, ...; ranges like 2-3 s count
   once; a number glued to a word or a hyphen, as in SHA-256s or fp16x, is part of a name)
   must be a citation (rule 1) or be marked as not measured: a link to figures.md#not-measured
   whose title says what it is (a default, a limit, a target).
   Fenced blocks starting with `$ ` (a transcript of a run) must be cited (rule 2).
Why links: they render as ordinary links (the title shows the key on hover, the target
explains where the figure comes from), on GitHub and in MkDocs alike; an HTML comment
would be invisible to the reader.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_MEASURED = "not-measured"
UNITS = r"(?:µs|ms|s|KB|kB|MB|GB|TB|KiB|MiB|GiB|%|×|x|dB)"
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
FIGURE = re.compile(rf"(?<![\w.^/#-])({NUMBER}(?:\s?[-–]\s?{NUMBER})?)\s?{UNITS}(?![\w])")
CITATION = re.compile(r'\[([^\]\n]+)\]\((?:docs/)?figures\.md#([\w-]+)\s+"([^"\n]+)"\)')
FENCE = re.compile(r"^\s*(```+|~~~+)")  # indented too: a block inside a list item


def documents(root: Path = ROOT) -> list[Path]:
    """The pages whose figures are checked: the front door and every page of the manual."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass
class Problem:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def shown_numbers(text: str) -> list[tuple[float, float]]:
    """(value, tolerance) of each number in `text`: half a unit of its last shown digit."""
    out = []
    for token in re.findall(NUMBER, text):
        mantissa, _, exponent = token.replace(",", "").lower().partition("e")
        decimals = len(mantissa.partition(".")[2])
        power = int(exponent or 0)
        out.append((float(mantissa) * 10.0 ** power, 0.5 * 10.0 ** (power - decimals) * (1 + 1e-9)))
    return out


def matches(text: str, value) -> str | None:
    """None when `text` shows `value` under the rounding rule, else why not."""
    if isinstance(value, str):
        return f"cites a transcript, but {text!r} shows a number" if shown_numbers(text) else None
    values = value if isinstance(value, list) else [value]
    shown = shown_numbers(text)
    if len(shown) != len(values):
        return f"{text!r} shows {len(shown)} number(s), the result has {len(values)}: {value!r}"
    wrong = [(x, v) for (x, tolerance), v in zip(shown, values) if abs(x - v) > tolerance]
    return None if not wrong else f"{text!r} does not round {value!r} (shown {wrong[0][0]:g}, result {wrong[0][1]!r})"


def block_matches(block: str, recorded: str) -> bool:
    """The block equals the recorded transcript, `...` standing for any text within a line, and a
    line that is only `...` for any number of whole lines."""
    return re.fullmatch(_block_regex(block, numbers_free=False), recorded.strip("\n") + "\n") is not None


def _prose_lines(lines: list[str]) -> list[str]:
    """The lines without fenced blocks, code spans (which may run over a line break, not over a
    blank line) and link targets: their numbers are commands, values, paths and anchors."""
    kept, fence = [], None
    for line in lines:
        opened = FENCE.match(line)
        if fence or opened:
            fence = None if fence and line.lstrip().startswith(fence) else (fence or opened.group(1))
            kept.append("")
            continue
        kept.append(line)
    text = re.sub(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(kept),
                  flags=re.S)
    return [re.sub(r"\]\([^)]*\)", "]", line) for line in text.split("\n")]


def check_document(path: Path, load_family, root: Path = ROOT) -> list[Problem]:
    name = str(path.relative_to(root))
    problems: list[Problem] = []
    lines = path.read_text().splitlines()
    prose = _prose_lines([CITATION.sub(" ", line) for line in lines])
    fence, block, block_start, last_block = None, [], 0, None  # last_block: (first line, text, closing line)
    for number, line in enumerate(lines, 1):
        if fence:
            if line.lstrip().startswith(fence):
                fence, last_block = None, (block_start, "\n".join(block), number)
                continue
            block.append(line)
            continue
        opened = FENCE.match(line)
        if opened:
            fence, block, block_start = opened.group(1), [], number
            continue
        following = last_block if last_block and number == last_block[2] + 1 else None
        cited_block = False
        for shown, family, key in CITATION.findall(line):
            if family == NOT_MEASURED:
                continue
            try:
                figures = load_family(family)["figures"]
            except FileNotFoundError:
                problems.append(Problem(name, number, f"cites bench/{family}/results.json, which does not exist"))
                continue
            if key not in figures:
                problems.append(Problem(name, number, f"cites {key!r}, not in bench/{family}/results.json"))
                continue
            value = figures[key]
            if isinstance(value, str):
                cited_block = True
                if following is None:
                    problems.append(Problem(name, number, f"cites the transcript {family}:{key} "
                                                          "but is not the line after a code block"))
                elif not block_matches(following[1], value):
                    problems.append(Problem(name, following[0], f"the block differs from {family}:{key}, "
                                                                f"which is:\n{value}"))
                continue
            why = matches(shown, value)
            if why:
                problems.append(Problem(name, number, f"{family}:{key}: {why}"))
        if following is not None and following[1].startswith("$ ") and not cited_block:
            problems.append(Problem(name, following[0], "a transcript of a run must be cited on the line after it"))
        if line.lstrip().startswith("#"):
            continue
        for figure in FIGURE.finditer(prose[number - 1]):
            problems.append(Problem(name, number, f"uncited figure {figure.group(0)!r}: cite its result "
                                                  "or mark it not measured (docs/figures.md)"))
    if last_block and last_block[2] == len(lines) and last_block[1].startswith("$ "):
        problems.append(Problem(name, last_block[0], "a transcript of a run must be cited on the line after it"))
    return problems


def formatted(token: str, value: float) -> str:
    """`value` written as `token` is: the same decimals, thousands separators, exponent style."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if exponent:
        digits, _, power = f"{value:.{decimals}e}".partition("e")
        return f"{digits}e{int(power)}"
    return f"{value:,.{decimals}f}" if "," in token else f"{value:.{decimals}f}"


def _block_regex(block: str, numbers_free: bool) -> str:
    """The block as a pattern: `...` any text within a line, a line of only `...` any lines; with
    `numbers_free`, every number of the block matches any number, and each run of literal text is
    a group (so a new recording can be written in the block's shape)."""
    def literal(part: str) -> str:
        if not numbers_free:
            return re.escape(part)
        pieces = re.split(r"(\d+(?:\.\d+)?)", part)
        return "(" + "".join(r"\d+(?:\.\d+)?" if i % 2 else re.escape(piece) for i, piece in enumerate(pieces)) + ")"

    pattern = ""
    for line in block.split("\n"):
        if line.strip() == "...":
            pattern += "(?:[^\n]*\n)*?"
        else:
            pattern += "".join("[^\n]*?" if part == "..." else literal(part) for part in re.split(r"(\.\.\.)", line)
                               if part) + "\n"
    return pattern


def rewritten_block(block: str, recorded: str) -> str | None:
    """The block in its shape (the same lines elided, the same `...`) with the recording's text, or
    None when the recording no longer has that shape (then the page needs a hand edit)."""
    found = re.fullmatch(_block_regex(block, numbers_free=True), recorded.strip("\n") + "\n")
    if not found:
        return None
    groups = iter(found.groups())
    out = []
    for line in block.split("\n"):
        if line.strip() == "...":
            out.append(line)
        else:
            out.append("".join("..." if part == "..." else next(groups) for part in re.split(r"(\.\.\.)", line) if part))
    return "\n".join(out)


def update_transcripts(text: str, load_family) -> str:
    """Rewrite each cited transcript block from its recording, keeping the page's elisions."""
    lines = text.split("\n")
    fence, start = None, 0
    for number, line in enumerate(lines):
        if fence:
            if line.lstrip().startswith(fence):
                fence = None
                citation = CITATION.search(lines[number + 1]) if number + 1 < len(lines) else None
                if citation and citation.group(2) != NOT_MEASURED:
                    try:
                        value = load_family(citation.group(2))["figures"].get(citation.group(3))
                    except FileNotFoundError:
                        value = None
                    block = "\n".join(lines[start + 1:number])
                    new = rewritten_block(block, value) if isinstance(value, str) else None
                    if new is not None:
                        lines[start + 1:number] = new.split("\n")
            continue
        opened = FENCE.match(line)
        if opened:
            fence, start = opened.group(1), number
    return "\n".join(lines)


def update_text(text: str, load_family) -> str:
    """Rewrite every numeric citation's numbers from its result (`--update`): the figures are
    regenerated, not copied by hand; then the cited transcripts (`update_transcripts`)."""
    def rewrite(match: re.Match) -> str:
        shown, family, key = match.groups()
        if family == NOT_MEASURED:
            return match.group(0)
        try:
            value = load_family(family)["figures"].get(key)
        except FileNotFoundError:
            return match.group(0)
        values = value if isinstance(value, list) else [value]
        tokens = re.findall(NUMBER, shown)
        if isinstance(value, str) or value is None or len(tokens) != len(values):
            return match.group(0)
        parts = iter(formatted(token, v) for token, v in zip(tokens, values))
        return match.group(0).replace(f"[{shown}]", "[" + re.sub(NUMBER, lambda _: next(parts), shown) + "]", 1)

    return update_transcripts(CITATION.sub(rewrite, text), load_family)


def check(root: Path = ROOT) -> list[Problem]:
    load_family = _loader(root)
    return [problem for path in documents(root) for problem in check_document(path, load_family, root)]


def _loader(root: Path):
    cache: dict[str, dict] = {}

    def load_family(family: str) -> dict:
        if family not in cache:
            cache[family] = json.loads((root / "bench" / family / "results.json").read_text())
        return cache[family]
    return load_family


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--update"]:
        load_family = _loader(ROOT)
        for path in documents():
            text = path.read_text()
            updated = update_text(text, load_family)
            if updated != text:
                path.write_text(updated)
                print(f"updated {path.relative_to(ROOT)}")
    elif argv:
        raise SystemExit("usage: python -m bench.common.figures [--update]")
    problems = check()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in the figures of README.md and docs/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
