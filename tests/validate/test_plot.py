"""The accuracy picture: rows from a real localisation of naive FP16 nafnet, a PNG that is written
the same way every time, fast on a big model, with no pyplot state."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from tests.validate.naive_fp16 import fp16_except, naive_fp16
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.precision.network.decisions import Decision
from trtpipe.numerics.inputs import generate_inputs
from trtpipe.validate.localize import localize
from trtpipe.validate.plot import plot_rows_from_localization, write_accuracy_plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIRST_POW = "/encoders.0/encoders.0.0/norm1/Pow"


@pytest.fixture(scope="module")
def nafnet_localisation():
    model = builtin_model("nafnet")
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS["nafnet"], seed=0, iterations=1)[0]
    return model, feeds, localize(model, naive_fp16(model), feeds)


def test_rows_follow_the_localisation(nafnet_localisation):
    _, _, found = nafnet_localisation
    rows = plot_rows_from_localization(found)
    assert [row["node"] for row in rows] == list(dict.fromkeys(t.node for t in found.tensors))
    assert set(rows[0]) == {"node", "op_type", "ref_max_abs", "error", "precision", "failed"}
    first = next(row for row in rows if row["failed"])
    assert first["node"] == FIRST_POW and first["error"] == math.inf and first["ref_max_abs"] > 65504
    assert {row["precision"] for row in rows} >= {"fp16"}
    # A plan (Decisions or strings) decides which nodes are drawn as kept FP32.
    plan = {FIRST_POW: Decision("fp32", "test"), "/intro/Conv": "fp32", "/ending/Conv": "keep"}
    planned = {row["node"]: row["precision"] for row in plot_rows_from_localization(found, plan)}
    assert planned[FIRST_POW] == "fp32" and planned["/intro/Conv"] == "fp32"
    assert planned["/ending/Conv"] == "fp16"  # not a precision: the candidate's own type is shown


def test_writes_the_same_png_every_time(nafnet_localisation, tmp_path):
    _, _, found = nafnet_localisation
    rows = plot_rows_from_localization(found)
    pyplot_loaded = "matplotlib.pyplot" in sys.modules
    paths = [
        write_accuracy_plot(tmp_path / f"plot{i}.png", rows, title="nafnet: naive FP16 vs FP32",
                            error_threshold=found.threshold)
        for i in range(2)
    ]
    data = paths[0].read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert paths[1].read_bytes() == data  # no timestamp or version in the file
    assert b"Software" not in data
    assert ("matplotlib.pyplot" in sys.modules) == pyplot_loaded  # Figure API only, no pyplot state


def test_a_passing_candidate_plots_without_a_failure_label(nafnet_localisation, tmp_path):
    model, feeds, _ = nafnet_localisation
    protected = fp16_except(model, lambda node: "/norm1/" in node.name or "/norm2/" in node.name)
    found = localize(model, protected, feeds)
    rows = plot_rows_from_localization(found)
    assert not any(row["failed"] for row in rows) and any(row["precision"] == "fp32" for row in rows)
    path = write_accuracy_plot(tmp_path / "ok.png", rows, title="nafnet: norms FP32")
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def _rows(count: int) -> list[dict]:
    random = np.random.default_rng(0)
    return [
        {"node": f"/block{i // 10}/op{i % 10}", "op_type": "Add", "ref_max_abs": float(10 ** random.uniform(-3, 6)),
         "error": math.inf if i % 97 == 0 else (0.0 if i % 89 == 0 else float(10 ** random.uniform(-5, 0))),
         "precision": "fp32" if i % 7 == 0 else "fp16", "failed": i % 13 == 0}
        for i in range(count)
    ]


def test_the_drawing_work_does_not_grow_with_the_node_count(tmp_path, monkeypatch):
    """Fast on big models by construction, not by a stopwatch (speed belongs to bench/): one
    scatter call per colour group and text for a few nodes only, so 2,000 nodes make exactly
    the matplotlib calls 200 nodes make."""
    from matplotlib.axes import Axes

    calls: dict[str, int] = {}
    for name in ("scatter", "annotate", "text", "plot"):
        original = getattr(Axes, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Axes, name, counted)
    per_size = {}
    for count in (200, 2000):
        calls.clear()
        path = write_accuracy_plot(tmp_path / f"{count}.png", _rows(count), title=f"{count} nodes")
        assert path.read_bytes().startswith(PNG_SIGNATURE)
        per_size[count] = dict(calls)
    assert per_size[200] == per_size[2000], per_size
    assert sum(per_size[2000].values()) <= 20, per_size


def test_node_names_with_control_characters_draw_without_glyph_warnings(nafnet_localisation, tmp_path):
    """Issue 22, item 16: names holding \\r or \\0 made matplotlib warn "Glyph 13 missing from font(s)"
    on stderr for every such character; the label now shows the escape instead."""
    import warnings

    _, _, found = nafnet_localisation
    rows = plot_rows_from_localization(found)
    for index, row in enumerate(rows):  # every name, so the first failure and the worst nodes hold them too
        row["node"] = f"{row['node']}\r{index}\0"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = write_accuracy_plot(tmp_path / "controls.png", rows, title="names with\rcontrols",
                                   error_threshold=found.threshold)
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert [str(w.message) for w in caught if "Glyph" in str(w.message)] == []
