"""Shell completion offers `+recipe=`, the form that works.

Hydra completes every config group as `GROUP=` (`_query_config_groups` in
hydra/plugins/completion_plugin.py), also a group that is not in the defaults
list, such as `recipe`: the completed `recipe=fp32` then fails ("Could not
override 'recipe'"). Decision: the completion query (`trtpipe -sc query=bash`,
also used by zsh; `query=fish`) runs Hydra's own completion with its output
captured, and every offered word `recipe=...` becomes `+recipe=...` (a word
already offered as `+recipe=...` is kept once). Only the query's output is
touched; `install=`/`uninstall=` print Hydra's scripts unchanged.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator

_FLAGS = ("-sc", "--shell-completion")
# A word starting with `recipe=` (not `+recipe=`), in bash's space- or fish's line-separated output.
_BARE_RECIPE = re.compile(r"(?<!\S)recipe=")


def is_completion_query(argv: list[str]) -> bool:
    return any(flag in argv for flag in _FLAGS) and any(arg.startswith("query=") for arg in argv)


def with_plus_recipe(output: str) -> str:
    """Hydra's completion output with `recipe=...` words offered as `+recipe=...`, each once."""
    lines = []
    for line in output.split("\n"):
        separator = " " if " " in line else None
        words = line.split(separator) if separator else [line]
        fixed = list(dict.fromkeys(_BARE_RECIPE.sub("+recipe=", word) for word in words))
        lines.append((separator or "").join(fixed))
    return "\n".join(lines)


@contextlib.contextmanager
def completion_output(argv: list[str]) -> Iterator[None]:
    """Around Hydra's run: for a completion query, rewrite what it prints (see the module docstring)."""
    if not is_completion_query(argv):
        yield
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        sys.stdout.write(with_plus_recipe(captured.getvalue()))
        sys.stdout.flush()
