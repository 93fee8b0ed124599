"""Sample inputs that would make every comparison vacuous are refused before the model runs.

Decisions:
- An empty sample input (a dimension of size 0) leaves every output empty: validation
  would compare nothing and "pass", and the precision stage's range rule would see no value
  and put everything in FP16 (issue 22 item 5: a [0, 16] input did both). Always refused.
- inf/NaN in a float sample input makes the reference inf/NaN wherever it reaches: those
  positions are left out of every metric, so all-NaN data "passed" with nothing compared.
  Refused unless `data.allow_nonfinite=true` (a model built to take them, e.g. a mask of
  -inf), in which case validate's `min_compared` share still guards each output.
- Checked on the loaded file before any stage runs (pipeline) and again on the feeds a stage
  builds (generated inputs take static shapes from the model): one line, exit 2.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Mapping

from trtpipe.errors import UserError

if TYPE_CHECKING:
    import numpy as np

ALLOW_KEY = "allow_nonfinite"


def check_sample_values(iterations: Iterable[Mapping[str, np.ndarray]], allow_nonfinite: bool, where: str) -> None:
    import numpy as np  # here: a run of generated inputs checks their specs only (check_generation_specs)

    for index, feeds in enumerate(iterations):
        for name, value in feeds.items():
            array = np.asarray(value)
            at = f"sample input {name!r} ({where}, iteration {index})"
            if array.size == 0:
                raise UserError(f"{at} is empty (shape {list(array.shape)}): nothing would be run or compared",
                                "give every sample input at least one element (a shape without 0)")
            if allow_nonfinite or array.dtype.kind not in "fc":
                continue
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            if bad:
                raise UserError(
                    f"{at} holds {bad} inf/NaN value(s) of {array.size}: the reference would be inf/NaN "
                    "where they reach, and those positions cannot be compared",
                    f"give finite sample values, or, if the model is meant to take them, data.{ALLOW_KEY}=true")


def check_generation_specs(inputs: Mapping[str, Mapping], allow_nonfinite: bool) -> None:
    """The same rule for generated inputs, from their specs (low/high, shape)."""
    for name, spec in inputs.items():
        shape = spec.get("shape")
        if shape and any(int(size) == 0 for size in shape):
            raise UserError(f"data.inputs.{name}.shape {list(shape)} has a dimension of size 0: nothing would be "
                            "run or compared", f"give data.inputs.{name}.shape sizes of at least 1")
        if allow_nonfinite:
            continue
        for bound in ("low", "high"):
            value = spec.get(bound)
            if isinstance(value, float) and not math.isfinite(value):  # an int is finite
                raise UserError(f"data.inputs.{name}.{bound} is {value}: every generated value would be inf/NaN",
                                f"give a finite data.inputs.{name}.{bound}, or data.{ALLOW_KEY}=true")
