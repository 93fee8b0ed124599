"""Command-line overrides that messages suggest, written so that they work when pasted.

Decisions:
- A Fix that names an override is pasted into a shell: it is single-quoted,
  since brackets are a glob and `{a,b}` a brace expansion there.
- Input names come from exporters ("input.1", "x:0", "serving_default_x/0").
  `++data.inputs.NAME.shape=...` only works for a plain identifier (a dot
  would nest the key, and a key path has no escapes at all); other names go in
  Hydra's dict form (`++data.inputs={input.1:{shape:[..]}}`, which merges into
  data.inputs), with the characters Hydra's grammar reads only escaped written
  with a backslash: `{serving_default_input_2\\:0:{shape:[..]}}` (tf2onnx's
  `:0`; Hydra's ESC token: `\\ ( ) [ ] { } : = , ` space and tab). The single
  quotes keep the backslash from the shell. Whether Hydra's grammar reads the
  text back as exactly the name is asked of Hydra's own parser; a name it cannot
  read even escaped (a quote, `#`, a non-ASCII letter) has no override, and the
  caller says so (data.path takes any name).
- `++`: adds the key or replaces it, so the same text works whether or not the
  user already wrote data.inputs.NAME.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# The characters Hydra's override grammar reads only escaped (its lexer's ESC token; hydra's
# `_internal/grammar/utils.py` keeps the same list as `_ESC`).
_HYDRA_ESCAPED = frozenset("\\()[]{}:=, \t")


def dict_key(name: str) -> str | None:
    """`name` as written in a Hydra dict key (`x:0` -> `x\\:0`), or None when Hydra's grammar
    cannot read any text back as exactly this key."""
    if _IDENTIFIER.fullmatch(name):
        return name
    from hydra.core.override_parser.overrides_parser import OverridesParser

    text = "".join("\\" + c if c in _HYDRA_ESCAPED else c for c in name)
    try:
        parsed = OverridesParser.create().parse_overrides([f"k={{{text}:1}}"])[0].value()
    except Exception:  # Hydra's OverrideParseException and grammar errors
        return None
    return text if isinstance(parsed, dict) and list(parsed) == [name] else None


def _list(values: Sequence[int]) -> str:
    return "[" + ",".join(str(int(value)) for value in values) + "]"


def input_shape_override(name: str, shape: Sequence[int]) -> str | None:
    """The quoted override that sets data.inputs.<name>.shape, or None when no override can name it."""
    if _IDENTIFIER.fullmatch(name):
        return f"'++data.inputs.{name}.shape={_list(shape)}'"
    if (key := dict_key(name)) is not None:
        return f"'++data.inputs={{{key}:{{shape:{_list(shape)}}}}}'"
    return None


def input_spec_override(name: str, fields: Mapping[str, object]) -> str | None:
    """The quoted override that merges `fields` into data.inputs.<name> (Hydra merges dicts), or None."""
    spec = _spec(fields)
    if _IDENTIFIER.fullmatch(name):
        return f"'++data.inputs.{name}={spec}'"
    if (key := dict_key(name)) is not None:
        return f"'++data.inputs={{{key}:{spec}}}'"
    return None


def input_specs_override(specs: Mapping[str, Mapping[str, object]]) -> str | None:
    """One quoted override that merges each input's fields into data.inputs, or None."""
    if len(specs) == 1:
        return input_spec_override(*next(iter(specs.items())))
    keys = {name: dict_key(name) for name in specs}
    if None in keys.values():
        return None
    return "'++data.inputs={" + ",".join(f"{keys[name]}:{_spec(fields)}" for name, fields in specs.items()) + "}'"


def _spec(fields: Mapping[str, object]) -> str:
    return "{" + ",".join(f"{key}:{_list(value) if isinstance(value, (list, tuple)) else value}"
                          for key, value in fields.items()) + "}"


def profiles_override(shapes: Mapping[str, Sequence[int]]) -> str | None:
    """The quoted `build.profiles` override with min = opt = max = `shapes`, or None (see above)."""
    keys = {name: dict_key(name) for name in shapes}
    if None in keys.values():
        return None
    entries = ",".join(f"{keys[name]}:{{min:{_list(s)},opt:{_list(s)},max:{_list(s)}}}" for name, s in shapes.items())
    return f"'build.profiles=[{{{entries}}}]'"


def profile_list_override(profiles: Sequence[Mapping[str, Mapping[str, Sequence[int]]]]) -> str | None:
    """The quoted `build.profiles` override of these profiles ({input: {min, opt, max}} each), or None."""
    keys = {name: dict_key(name) for profile in profiles for name in profile}
    if None in keys.values():
        return None
    written = ",".join("{" + ",".join(
        f"{keys[name]}:{{min:{_list(spec['min'])},opt:{_list(spec['opt'])},max:{_list(spec['max'])}}}"
        for name, spec in profile.items()) + "}" for profile in profiles)
    return f"'build.profiles=[{written}]'"


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
