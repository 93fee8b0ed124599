"""Overrides that need a leading `+`: the exact override that works, quoted for the shell.

Hydra refuses `key=value` for a key the config does not have yet (a new entry of
`data.inputs`, `precision.rules`, `validate.outputs`) and for a config group that is
not in the defaults list (`recipe`), and its message ends with the override that
works: "To append to your config use +KEY=VALUE" / "To append to your default list
use +GROUP=NAME". Decisions:
- The Fix is that override as the user typed it with `++` (adds the key or replaces it:
  `+` fails where an interpolation already provides the key, e.g.
  `precision.search.tolerance.rel_l2` under `${validate.tolerance}`), or `+` for a
  group, single-quoted (a value
  such as `{low:0,high:2}` is a brace expansion in a shell, `[1,3]` a glob), and it says
  that it replaces the one without `+` (both on one line would still fail on the first).
- `recipe=NAME` for a NAME that is not a recipe gets the list of recipes too: the
  pasted `+recipe=NAME` would only fail next with "Could not find".
"""

from __future__ import annotations

import re

from trtpipe.config.override_text import shell_quoted
from trtpipe.errors import UserError

_APPEND = re.compile(r"To append to your (config|default list) use (\+(.+))$", re.DOTALL)


def typed_override(message: str) -> str | None:
    """The override as typed (without the +) that Hydra's "To append ..." message quotes, or None."""
    match = _APPEND.search(message)
    return match.group(3).strip() if match else None


def append_hint(message: str) -> UserError | None:
    """The UserError for Hydra's "To append ... use +KEY=VALUE" message, or None for any other."""
    match = _APPEND.search(message)
    if match is None:
        return None
    kind, with_plus, typed = match.group(1), match.group(2).strip(), match.group(3).strip()
    key, _, value = typed.partition("=")
    if kind == "default list":
        from trtpipe.config.check import _registered_recipes
        from trtpipe.config.store import RECIPE_GROUP

        fix = f"replace {shell_quoted(typed)} with {shell_quoted(with_plus)}"
        if key == RECIPE_GROUP:
            recipes = _registered_recipes()
            if value not in recipes:
                fix = f"replace {shell_quoted(typed)} with '+recipe=NAME', NAME one of: {', '.join(recipes)}"
        return UserError(
            f"config: '{typed}' selects nothing: '{key}' is not in the defaults list, so it is added "
            f"with a leading + (+{key}=...)",
            fix,
        )
    return UserError(
        f"config key '{key}' is a new entry: a key the config does not have yet is added with a leading ++ (or +)",
        f"replace {shell_quoted(typed)} with {shell_quoted('++' + typed)}",
    )
