"""Names shortened for a table column or a plot label: from the middle, and never two alike.

Decisions:
- Exporter names say most at both ends (`/encoder/layer.11/.../Softmax_output_0`): a
  long name keeps its start and its end and loses the middle (`…` marks the cut). The
  end gets two thirds of the room.
- Two names must never be shown alike (two rows reading `…/Softmax_output_0` say
  nothing). Names whose shortened forms collide are cut at the same other point, the
  nearest to the usual one that tells all of them apart (and no other name shown);
  when no cut does (they differ only deep in the middle), each gets its number in the
  cut (`/enc…2…/Softmax_output_0`).
- A guarantee, not a hope: a last pass compares every shown form with every other (two
  groups numbered apart, a short name equal to another's cut) and numbers each name
  still shown alike, with numbers used once in the whole table, within the width. A
  width too narrow for any number to tell the names apart is an error, not a duplicate.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

ELLIPSIS = "…"


def shorten(name: str, width: int, head: int | None = None) -> str:
    """`name` within `width` characters: its first `head` and its last characters, `…` between."""
    if len(name) <= width:
        return name
    keep = width - 1
    head = keep // 3 if head is None else max(0, min(head, keep))
    return name[:head] + ELLIPSIS + name[len(name) - (keep - head):]


def unique_short_names(names: Iterable[str], width: int) -> dict[str, str]:
    """Each distinct name -> its shown form, at most `width` characters, no two alike."""
    distinct = list(dict.fromkeys(names))
    shown = {name: name for name in distinct if len(name) <= width}
    groups: dict[str, list[str]] = defaultdict(list)
    for name in distinct:
        if name not in shown:
            groups[shorten(name, width)].append(name)
    taken = set(shown.values()) | {text for text, group in groups.items() if len(group) == 1}
    for text, group in groups.items():
        if len(group) == 1:
            shown[group[0]] = text
            continue
        taken.discard(text)
        chosen = _common_cut(group, width, taken)
        for index, name in enumerate(group, start=1):
            shown[name] = chosen[name] if chosen else _numbered(name, width, index)
            taken.add(shown[name])
    return _numbered_apart(shown, width)


def _numbered_apart(shown: dict[str, str], width: int) -> dict[str, str]:
    """Every name whose shown form another name shares gets a number of its own (in name order)."""
    counts = Counter(shown.values())
    alike = [name for name, text in shown.items() if counts[text] > 1]
    taken = {text for text, count in counts.items() if count == 1}
    number = 0
    for name in alike:
        while True:
            number += 1
            if len(str(number)) > width:
                raise ValueError(f"{width} characters cannot tell {len(shown)} names apart")
            text = _numbered(name, width, number)
            if text not in taken:
                break
        shown[name] = text
        taken.add(text)
    return shown


def _common_cut(group: list[str], width: int, taken: set[str]) -> dict[str, str] | None:
    """The cut nearest the usual one that shows every name of `group` differently, if any."""
    keep = width - 1
    usual = keep // 3
    for distance in range(1, keep + 1):
        for head in (usual + distance, usual - distance):  # more of the start first: the end is shared
            if not 0 <= head <= keep:
                continue
            texts = {name: shorten(name, width, head) for name in group}
            if len(set(texts.values())) == len(group) and not set(texts.values()) & taken:
                return texts
    return None


def _numbered(name: str, width: int, number: int) -> str:
    mark = f"{ELLIPSIS}{number}{ELLIPSIS}"
    if len(mark) > width:  # a very narrow column: the number alone
        return str(number)
    keep = min(width - len(mark), len(name))
    head = keep // 3
    return name[:head] + mark + name[len(name) - (keep - head):]
