"""The accuracy plot's axes and labels, read from the matplotlib objects (Agg), not pixels:
errors clipped at a floor and counted, mask-constant magnitudes on their own marker line,
the worst nodes named. Rows come from a real localisation of naive FP16 on the built-in
transformer (its attention mask is -3.4e38, several nodes have an error of exactly 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.validate.naive_fp16 import naive_fp16
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.inputs import generate_inputs
from trtpipe.validate.localize import localize
from trtpipe.validate.plot import (ERROR_FLOOR, EXTREME_MAGNITUDE, WORST_NAMED, accuracy_figure,
                                   plot_rows_from_localization)


@pytest.fixture(scope="module")
def transformer_rows():
    model = builtin_model("transformer")
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS["transformer"], seed=0, iterations=1)[0]
    found = localize(model, naive_fp16(model), feeds)
    return plot_rows_from_localization(found), found.threshold


def _texts(figure) -> list[str]:
    return ([t.get_text() for t in figure.texts] + [t.get_text() for axis in figure.axes for t in axis.texts]
            + [axis.get_title(loc="left") for axis in figure.axes])


def test_exact_zero_errors_do_not_stretch_the_error_axis(transformer_rows):
    rows, threshold = transformer_rows
    rows = [dict(row) for row in rows]
    rows[-1]["error"] = 1e-41  # a denormal-sized error, as exact zeros, must not set the axis
    zeros = sum(row["error"] == 0 for row in rows)
    at_floor = sum(row["error"] <= ERROR_FLOOR for row in rows)
    assert zeros > 0  # the real data has exact zeros
    figure = accuracy_figure(rows, title="t", error_threshold=threshold)
    top, bottom = figure.axes[:2]
    low, high = bottom.get_ylim()
    assert ERROR_FLOOR / 10 < low <= ERROR_FLOOR
    lowest_plotted = min(float(np.min(c.get_offsets()[:, 1])) for c in bottom.collections if len(c.get_offsets()))
    assert lowest_plotted == pytest.approx(ERROR_FLOOR)
    assert any(f"{at_floor} node(s) with error <= {ERROR_FLOOR:g}" in t and f"({zeros} exactly 0)" in t
               for t in _texts(figure)), _texts(figure)


def test_mask_constant_magnitudes_get_their_own_marker(transformer_rows):
    rows, threshold = transformer_rows
    extreme = [i for i, row in enumerate(rows) if row["ref_max_abs"] > EXTREME_MAGNITUDE]
    ordinary = max(row["ref_max_abs"] for row in rows if row["ref_max_abs"] <= EXTREME_MAGNITUDE)
    assert extreme  # the model's -3.4e38 mask
    figure = accuracy_figure(rows, title="t", error_threshold=threshold)
    top = figure.axes[0]
    _, high = top.get_ylim()
    assert high < 1e4 * max(ordinary, 65504.0)  # not compressed up to 1e38
    marked = next(c for c in top.collections if c.get_label() == f"max |x| > {EXTREME_MAGNITUDE:g}")
    assert sorted(marked.get_offsets()[:, 0].astype(int).tolist()) == extreme
    assert any(f"{len(extreme)} node(s) with max |x| > " in t and "3.4e+38" in t for t in _texts(figure))


def test_the_worst_nodes_are_named_not_only_the_first_failure(transformer_rows):
    rows, threshold = transformer_rows
    figure = accuracy_figure(rows, title="t", error_threshold=threshold)
    listing = next(t for t in _texts(figure) if t.startswith("largest errors:"))
    first_inf = next(i for i, row in enumerate(rows) if row["failed"] and row["error"] == math.inf)
    ranked = sorted((i for i, row in enumerate(rows) if math.isfinite(row["error"]) and row["error"] > ERROR_FLOOR
                     and i != first_inf), key=lambda i: -rows[i]["error"])[:WORST_NAMED]
    assert len(ranked) == WORST_NAMED
    for rank, index in enumerate(ranked, start=1):
        node = rows[index]["node"]
        line = next(line for line in listing.splitlines() if line.startswith(f"{rank} "))
        shown = line[len(f"{rank} "):]
        # Cut in the middle: the name's start and end are both there.
        assert shown == node or (shown.split("…")[0] == node[:len(shown.split("…")[0])]
                                 and node.endswith(shown.split("…")[-1]))
        assert f"error {rows[index]['error']:.3g}" in listing
    assert any(t.startswith("first inf/NaN: " + rows[first_inf]["node"]) for t in _texts(figure))


def test_a_plot_without_zeros_or_masks_says_nothing_of_them():
    rows = [{"node": f"n{i}", "op_type": "Add", "ref_max_abs": 10.0 ** (i % 5), "error": 10.0 ** -(i % 4 + 1),
             "precision": "fp16", "failed": False} for i in range(20)]
    figure = accuracy_figure(rows, title="clean", error_threshold=0.5)
    texts = " ".join(_texts(figure))
    assert "drawn here" not in texts
    assert figure.axes[1].get_ylim()[0] == pytest.approx(1e-4 / 3.0)  # the data's lowest, not the floor


def test_the_first_failure_and_the_numbers_of_close_worst_nodes_cover_no_point(transformer_rows):
    """Issue 33, item 7: the "first inf/NaN" box sat among the points and over the numbered worst
    nodes, and the numbers of neighbouring nodes were printed over one another."""
    rows, threshold = transformer_rows
    rows = [dict(row) for row in rows]
    for index in (30, 31, 32):  # three neighbours among the worst
        rows[index].update(error=50.0 + index, failed=True)
    figure = accuracy_figure(rows, title="t", error_threshold=threshold)
    bottom = figure.axes[1]
    assert bottom.get_title(loc="left").startswith("first inf/NaN: ")  # above the panel, not in it
    assert not [t for t in bottom.texts if t.get_text().startswith("first")]
    numbers = {t.get_text(): t for t in bottom.texts if t.get_text().isdigit()}
    heights = {t.xyann[1] for text, t in numbers.items() if text in ("1", "2", "3")}
    assert len(heights) == 3, "three neighbouring worst nodes: three label heights"
