"""Why did a stage re-run? Compare its key material with the closest earlier one.

Decision (after DVC): the cache stores the material of each key, not only the hash,
so a miss can name the value that changed instead of saying "key differs".

Decisions:
- A non-change is not reported: an empty mapping that gained entries (`{} -> null`
  next to the entry that appeared) is the same change as its entries, said once.
- The one or two changes that matter come first: a changed input (a different model
  explains everything after it), then the user's settings, the files they name, the
  stage's version, tool versions and the machine; at most two are named, then "+N more".
- A setting that only entered or left the key because the key follows what the stage
  reads (switching the range rule off drops data.*) is not the user's change: when a
  value present on both sides changed, only such values are named (the others counted).
- Entries are compared with entries of the same model only (issue 33 item 6): the miss
  index records, next to each material, the run's source model (its path and sha256;
  not part of the key). "Same model" is the same path (the file as the user edits it:
  a changed digest there is a modified file, `inputs.model changed`) or the same bytes
  elsewhere (a copy). With no entry of this model, the reason is NO_ENTRY_FOR_MODEL:
  comparing with whatever model ran last said `inputs.model changed "352d…" -> "a3c0…"`
  on a new model's first run, as if the user's file had been modified. Entries written
  before the index held sources may be of this model: they are compared as before.
"""

from __future__ import annotations

import json
from typing import Any

_SHOWN_CHANGES = 2
# Material sections in the order a reader should see them (runner/pipeline.py builds them).
_SECTION_ORDER = ("inputs", "config", "files", "version", "stage", "tools", "environment")
_VALUE_WIDTH = 40
NO_EARLIER_ENTRY = "no earlier entry of this stage in the cache"
NO_ENTRY_FOR_MODEL = "no entry for this model in the cache"


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
        if before != after and not _emptied_or_filled(path, before, after, a, b, missing):
            changes.append((path, None if before is missing else before, None if after is missing else after))
    return changes


def _emptied_or_filled(path: str, before, after, a: dict, b: dict, missing) -> bool:
    """`{}` on one side and entries under `path.` on the other: the entries' changes say it."""
    prefix = path + "."
    if before == {} and after is missing:
        return any(key.startswith(prefix) for key in b)
    if after == {} and before is missing:
        return any(key.startswith(prefix) for key in a)
    return False


def importance(change: tuple[str, Any, Any]) -> tuple[int, bool, str]:
    """Sort key of a change (path, before, after): inputs, then config, files, version, tools,
    environment; within one, a value that changed before one that entered or left the key
    (switching the search on brings its settings in: the switch is the reason); then by name."""
    path, before, after = change
    section = path.split(".", 1)[0]
    rank = _SECTION_ORDER.index(section) if section in _SECTION_ORDER else len(_SECTION_ORDER)
    return rank, before is None or after is None, path


def same_model(one: dict | None, other: dict | None) -> bool | None:
    """Two runs' source models (`{"path", "sha256"}`): the same file or the same bytes; None: unknown."""
    if not one or not other:
        return None
    return one.get("path") == other.get("path") or one.get("sha256") == other.get("sha256")


def explain_miss(previous: list[dict], material: dict, *, source: dict | None = None,
                 sources: list[dict | None] | None = None) -> str:
    """One sentence: the changes against the most similar earlier material of the same model.
    `source`: this run's source model; `sources`: each earlier material's (None: not recorded)."""
    from trtpipe.cache.key_shape import in_current_shape

    if not previous:
        return NO_EARLIER_ENTRY
    if source is not None and sources is not None:
        verdicts = [same_model(earlier, source) for earlier in sources]
        kept = [index for index, verdict in enumerate(verdicts) if verdict]
        kept = kept or [index for index, verdict in enumerate(verdicts) if verdict is None]
        if not kept:  # every earlier entry is another model's
            return NO_ENTRY_FOR_MODEL
        previous = [previous[index] for index in kept]
    reshaped = [in_current_shape(old) for old in previous]  # entries written before Stage.key_config
    closest = min(range(len(previous)), key=lambda index: len(changed_paths(reshaped[index], material)))
    changes = changed_paths(reshaped[closest], material)
    if not changes:
        if reshaped[closest] != previous[closest]:
            return "the key no longer holds settings this stage does not read (entries of an earlier trtpipe)"
        return "its entry is no longer in the cache"
    before, after = flatten(reshaped[closest]), flatten(material)
    changed = [change for change in changes if change[0] in before and change[0] in after]
    # Settings that only entered or left the key (the key narrows to what the stage reads:
    # `precision.auto.max_abs=null` leaves data.* out) are named only when nothing else changed.
    named = sorted(changed or changes, key=importance)[:_SHOWN_CHANGES]
    shown = [f"{path} changed {_short(old)} -> {_short(new)}" for path, old, new in named]
    more = len(changes) - len(named)
    return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    if isinstance(value, str) and len(value) == 64:  # a digest: its head is enough
        text = json.dumps(value[:12] + "…", ensure_ascii=False)
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 1] + "…"
