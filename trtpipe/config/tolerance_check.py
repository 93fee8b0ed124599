"""Tolerance values out of range, refused at compose time with the full key.

Decisions:
- Checked for `validate.tolerance`, every `validate.outputs.<name>` and the
  same two under `precision.search` (which interpolates them by default but
  may be set on its own), before any stage runs: a bound no metric can meet
  or one every metric meets makes the verdict meaningless, and it was only
  discovered (or never) after the whole pipeline ran.
- Ranges: `cosine_min` in [-1, 1] (a cosine similarity's range; -1 judges
  nothing, 1 demands exact direction); error bounds (`max_abs`, `max_rel`,
  `abs_p99`, `rel_p99`, `rel_l2`) are >= 0 and finite (0 demands equality;
  to judge nothing, leave the bound null); `psnr_min` finite (a PSNR in dB is
  any real number, +inf would demand bit-equality, which `max_abs: 0` says
  plainly); the shares `pixels_off_8bit` and `argmax_agree_min` in [0, 1] (a
  share of elements or positions). NaN is refused everywhere: it would compare false and pass all.
- A per-output entry must be a mapping of known keys (the same keys as
  `validate.tolerance`); the key is named in full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from trtpipe.errors import UserError

ERROR_BOUNDS = ("max_abs", "max_rel", "abs_p99", "rel_p99", "rel_l2")
SHARES = ("pixels_off_8bit", "argmax_agree_min")
KEYS = (*ERROR_BOUNDS, "cosine_min", "psnr_min", *SHARES)


def check_tolerances(validate: Mapping | None, search: Mapping | None) -> None:
    """UserError naming the first tolerance key whose value is out of range."""
    for prefix, node in (("validate", validate), ("precision.search", search)):
        if not node:
            continue
        check_tolerance(f"{prefix}.tolerance", node.get("tolerance") or {})
        outputs = node.get("outputs") or {}
        if not isinstance(outputs, Mapping):
            raise UserError(f"{prefix}.outputs is {outputs!r}, not a mapping of output names to tolerances",
                            f"write {prefix}.outputs as {{OUTPUT: {{max_abs: 0.05}}}}")
        for output, values in outputs.items():
            check_tolerance(f"{prefix}.outputs.{output}", values)


def check_tolerance(where: str, values) -> None:
    if not isinstance(values, Mapping):
        raise UserError(f"{where} is {values!r}, not a tolerance", f"write {where} as {{max_abs: 0.05, cosine_min: 0.999}}")
    for key, value in values.items():
        if key not in KEYS:
            raise UserError(f"{where}.{key} is not a tolerance key", f"use one of {', '.join(KEYS)}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}.{key} is {value!r}, not a number", f"give a number or null, e.g. {_example(key)}")
        problem = _out_of_range(key, float(value))
        if problem:
            raise UserError(f"{where}.{key} is {value!r}: {problem}", f"{where}.{key}={_example(key)} (null: not judged)")


def _out_of_range(key: str, value: float) -> str | None:
    if math.isnan(value):
        return "NaN compares false with every metric and would judge nothing"
    if key == "cosine_min" and not -1.0 <= value <= 1.0:
        return "a cosine similarity lies in [-1, 1]"
    if key in ERROR_BOUNDS and not (0.0 <= value < math.inf):
        return "an error bound is a finite number >= 0"
    if key == "psnr_min" and not math.isfinite(value):
        return "a PSNR bound is a finite number of dB (to demand equality, set max_abs: 0)"
    if key in SHARES and not 0.0 <= value <= 1.0:
        return "a share of elements lies in [0, 1]"
    return None


def _example(key: str) -> str:
    return {"cosine_min": "0.999", "psnr_min": "40", "rel_l2": "0.044", "pixels_off_8bit": "0.01",
            "argmax_agree_min": "0.999"}.get(key, "0.01")
