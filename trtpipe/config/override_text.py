"""Command-line overrides that messages suggest, written so that they work when pasted.

Decisions:
- A Fix that names an override is pasted into a shell: it is single-quoted,
  since brackets are a glob and `{a,b}` a brace expansion there.
- Input names come from exporters ("input.1", "x:0", "serving_default_x/0").
  `++data.inputs.NAME.shape=...` only works for a plain identifier (a dot
  would nest the key); other names go in Hydra's dict form
  (`++data.inputs={input.1:{shape:[..]}}`, which merges into data.inputs).
  Whether Hydra's grammar reads a name as a dict key is asked of Hydra's own
  parser; a name it cannot read ("x:0") has no override, and the caller says
  so (data.path takes any name).
- `++`: adds the key or replaces it, so the same text works whether or not the
  user already wrote data.inputs.NAME.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dict_key_ok(name: str) -> bool:
    """True when Hydra's override grammar reads `name` back as this dict key."""
    if _IDENTIFIER.fullmatch(name):
        return True
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([f"k={{{name}:1}}"])[0].value()
    except Exception:  # Hydra's OverrideParseException and grammar errors
        return False
    return isinstance(parsed, dict) and list(parsed) == [name]


def _list(values: Sequence[int]) -> str:
    return "[" + ",".join(str(int(value)) for value in values) + "]"


def input_shape_override(name: str, shape: Sequence[int]) -> str | None:
    """The quoted override that sets data.inputs.<name>.shape, or None when no override can name it."""
    if _IDENTIFIER.fullmatch(name):
        return f"'++data.inputs.{name}.shape={_list(shape)}'"
    if dict_key_ok(name):
        return f"'++data.inputs={{{name}:{{shape:{_list(shape)}}}}}'"
    return None


def input_spec_override(name: str, fields: Mapping[str, object]) -> str | None:
    """The quoted override that merges `fields` into data.inputs.<name> (Hydra merges dicts), or None."""
    def text(value) -> str:
        return _list(value) if isinstance(value, (list, tuple)) else str(value)

    spec = "{" + ",".join(f"{key}:{text(value)}" for key, value in fields.items()) + "}"
    if _IDENTIFIER.fullmatch(name):
        return f"'++data.inputs.{name}={spec}'"
    if dict_key_ok(name):
        return f"'++data.inputs={{{name}:{spec}}}'"
    return None


def profiles_override(shapes: Mapping[str, Sequence[int]]) -> str | None:
    """The quoted `build.profiles` override with min = opt = max = `shapes`, or None (see above)."""
    if not all(dict_key_ok(name) for name in shapes):
        return None
    entries = ",".join(f"{name}:{{min:{_list(s)},opt:{_list(s)},max:{_list(s)}}}" for name, s in shapes.items())
    return f"'build.profiles=[{{{entries}}}]'"


def shell_quoted(text: str) -> str:
    """`text` as one shell word whatever it holds: in single quotes, or in double quotes when it
    holds a `'` and nothing a shell expands inside double quotes (else a `'` is written `'"'"'`)."""
    if "'" in text and not any(c in text for c in '"$`\\!'):
        return f'"{text}"'
    return "'" + text.replace("'", "'\"'\"'") + "'"


def choice_fix(key: str, value: object, allowed: Sequence[str]) -> str:
    """"use one of A, B, e.g. 'KEY=closest'": the valid values and the override of the closest one."""
    from difflib import SequenceMatcher

    closest = max(allowed, key=lambda option: SequenceMatcher(None, str(value), option).ratio())
    return f"use one of {', '.join(allowed)}, e.g. {shell_quoted(f'{key}={closest}')}"
