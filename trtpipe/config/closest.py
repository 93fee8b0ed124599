"""The closest right answers to a misspelled name: one helper for every "did you mean".

Decisions:
- difflib's ratio (Ratcliff/Obershelp, the standard library's `get_close_matches`), as Hydra's
  and argparse's own suggestions use: a recipe, a config key, an output name, a precision
  rule's node name or op type are all suggested the same way, so the same typo gets the same
  kind of answer everywhere.
- `closest` keeps only names above `cutoff` (a suggestion must be plausible); `by_closeness`
  ranks every candidate (a short list the user must see whole, e.g. a model's outputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher, get_close_matches


def closest(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to `n` of `candidates` whose similarity to `name` is at least `cutoff`, the closest first."""
    return get_close_matches(name, list(candidates), n=n, cutoff=cutoff)


def by_closeness(name: str, candidates: Sequence[str]) -> list[str]:
    """`candidates`, the closest to `name` first (difflib's ratio; ties in the given order)."""
    return sorted(candidates, key=lambda c: -SequenceMatcher(None, name, c).ratio())
