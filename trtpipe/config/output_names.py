"""Per-output settings must name outputs the model has.

`validate.outputs.<name>` (and `precision.search.outputs.<name>`, which interpolates
it) sets the tolerance of one output. A name that is no output (`last_hidden` for
`last_hidden_state`) used to be ignored without a word, and the output was judged
by the default tolerance instead. Decisions:
- It is a UserError (exit 2), like a precision rule that matches nothing, naming
  every output that exists, closest to the misspelled name first.
- The Fix pastes: it removes the misspelled key and sets the same values under the
  closest output name (`'~validate.outputs.last_hidden'
  '++validate.outputs.last_hidden_state={cosine_min:0.99}'`), which works whether
  the entry came from the command line, a recipe or a user config.
- The names are those the candidate compares: the model's outputs, promoted
  intermediates under the name they are exposed as (`t__fp32`). Checked by the
  validate stage, which knows them; the precision search's copy is judged there too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtpipe.config.closest import by_closeness
from trtpipe.config.override_text import dict_key, shell_quoted
from trtpipe.errors import UserError


def check_output_names(where: str, configured: Mapping | None, outputs: Sequence[str]) -> None:
    """UserError for the first key of `configured` (the mapping at config key `where`) that names no output;
    for `configured` that is no mapping at all (a list or a string where names map to tolerances)."""
    if configured is not None and not isinstance(configured, Mapping):
        raise UserError(f"{where} is {configured!r}, not a mapping of output names to tolerances",
                        f"write {where} as {{OUTPUT: {{max_abs: 0.05}}}}")
    for name, values in (configured or {}).items():
        if name in outputs:
            continue
        ranked = by_closeness(str(name), list(outputs))
        problem = (f"{where}.{name} names no output of the model; its outputs, closest first: "
                   f"{', '.join(ranked) or 'none'}")
        raise UserError(problem, _fix(where, str(name), ranked[0] if ranked else None, values))


def _fix(where: str, name: str, closest: str | None, values) -> str:
    """Decision: a key path has no escapes, so only an identifier can be removed (`~KEY.NAME`); the
    closest name is set in Hydra's dict form with its `:` escaped where it is no identifier
    (tf2onnx's `Identity:0`: `{Identity\\:0:{...}}`, override_text.dict_key)."""
    remove = shell_quoted(f"~{where}.{name}") if name.isidentifier() else None
    key = dict_key(closest) if closest is not None else None
    if remove is None or key is None:
        return f"remove {where}.{name}, or name one of the outputs listed"
    spec = "{" + ",".join(f"{field}:{_text(value)}" for field, value in (values or {}).items()) + "}"
    setting = f"++{where}.{closest}={spec}" if closest.isidentifier() else f"++{where}={{{key}:{spec}}}"
    return f"if you meant {closest!r}, paste {remove} {shell_quoted(setting)}"


def _text(value) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)
