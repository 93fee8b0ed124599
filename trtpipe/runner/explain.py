"""Why did a stage re-run? Compare its key material with the closest earlier one.

Decision (after DVC): the cache stores the material of each key, not only the hash,
so a miss can name the value that changed instead of saying "key differs".
"""

from __future__ import annotations

import json
from typing import Any

_SHOWN_CHANGES = 3
_VALUE_WIDTH = 40


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, child in value.items():
            flat.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return flat or {prefix: {}}
    return {prefix: value}


def changed_paths(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    a, b = flatten(old), flatten(new)
    missing = object()
    changes = []
    for path in sorted(set(a) | set(b)):
        before, after = a.get(path, missing), b.get(path, missing)
        if before != after:
            changes.append((path, None if before is missing else before, None if after is missing else after))
    return changes


def explain_miss(previous: list[dict], material: dict) -> str:
    """One sentence: the changes against the most similar earlier material."""
    if not previous:
        return "no earlier entry of this stage in the cache"
    closest = min(previous, key=lambda old: len(changed_paths(old, material)))
    changes = changed_paths(closest, material)
    if not changes:
        return "its entry is no longer in the cache"
    # Inputs first: a different model explains everything after it.
    changes.sort(key=lambda change: (not change[0].startswith("inputs."), change[0]))
    shown = [f"{path} changed {_short(old)} -> {_short(new)}" for path, old, new in changes[:_SHOWN_CHANGES]]
    more = len(changes) - _SHOWN_CHANGES
    return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    if isinstance(value, str) and len(value) == 64:  # a digest: its head is enough
        text = json.dumps(value[:12] + "…", ensure_ascii=False)
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 1] + "…"
