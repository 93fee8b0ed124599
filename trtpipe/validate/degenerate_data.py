"""Whether a verdict was computed on degenerate sample data (issue 30, item 5).

A verdict on data that exercises nothing says little: the pasted `[0, 2)` ranges with `shape [1, 1]`
gave `trtpipe: ok` on one-token sequences of ids {0, 1}. Such data is flagged in the verdict
(`validation.json`'s `degenerate_data`, the stage line, the table), never judged: pass/fail does not
change, since the bounds were met on what was given, and the user may mean it (a constant-input
model, a one-step decoder).

Degenerate when, in every input set:
- every input is constant (each array holds one value: all zeros, all ones), or
- an input whose values index an embedding table (numerics/input_ranges.py: the model says it is
  token ids) is a sequence of length 1: every dim after the first (the batch) is 1; of a rank-1 input,
  its only dim. What is a sequence is read from the model, never from input names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx


def degenerate_data(feeds: Sequence[Mapping[str, np.ndarray]], model: onnx.ModelProto) -> str | None:
    """Why the sample data is degenerate, in words, or None."""
    if not feeds or not feeds[0]:
        return None
    if all(_constant(array) for feed in feeds for array in feed.values()):
        return "every input is constant in every input set"
    single = [name for name in _token_inputs(model, feeds[0])
              if all(_one_position(np.shape(feed[name])) for feed in feeds if name in feed)]
    if single:
        return f"token ids {', '.join(repr(name) for name in single)}: a sequence of length 1 in every input set"
    return None


def _constant(array) -> bool:
    flat = np.asarray(array).reshape(-1)
    return flat.size <= 1 or bool(np.all(flat == flat[0]))


def _one_position(shape: Sequence[int]) -> bool:
    positions = shape[1:] if len(shape) >= 2 else shape
    return len(positions) > 0 and all(int(size) == 1 for size in positions)


def _token_inputs(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> list[str]:
    from trtpipe.numerics.input_ranges import read_ranges

    integers = [name for name, array in feed.items() if np.asarray(array).dtype.kind in "iu"]
    return [name for name, found in read_ranges(model, integers).items() if found.table_rows is not None]
