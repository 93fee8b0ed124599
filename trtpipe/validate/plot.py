"""The accuracy picture: where activations outgrow FP16 and where the candidate's error enters.

One PNG, two panels over the nodes in topological order:
- top: the FP32 reference's max |x| per node (log scale) with the FP16 limit
  65504 as a horizontal line: whatever crosses it overflows in FP16;
- bottom: the candidate's error per node (log scale; by default the relative
  error max|candidate - reference| / max|reference| of localize.py), nodes the
  localisation failed ringed in red, inf/NaN drawn as a marker at the top
  labelled "inf/NaN", and the first failing node named (the first inf/NaN one
  when there is one, as in localize.py).
FP32 nodes are drawn in a different colour in both panels, so the picture shows
whether what was kept FP32 is where the magnitudes and the errors are.

Decisions:
- matplotlib is imported inside the function and driven through
  `matplotlib.figure.Figure` with the Agg canvas, never pyplot: no global
  figure state, no GUI backend, safe in worker processes and tests.
- Fast on big models (2,000 nodes well under a second): one scatter call per
  colour group, per-node text only for the first failure and the worst few nodes, fixed
  margins instead of tight_layout (which draws the figure twice).
- Reproducible: fixed size and dpi, PNG written with `metadata={"Software": None}`
  so no version string or timestamp is embedded.
- Log scales cannot show 0: reference magnitudes of 0 are drawn a decade below
  the smallest positive one. Errors are clipped at a fixed floor (`error_floor`,
  1e-7 by default: FP32 rounding, nothing to see below it), so exact zeros and
  denormal-sized errors do not stretch the axis down to 1e-40; the plot says how
  many nodes are drawn at the floor and how many of them are exactly 0.
- Magnitudes above `EXTREME_MAGNITUDE` (1e10: a mask constant such as -3.4e38 or
  -1e38, far beyond any activation FP16 could hold anyway) would squeeze every
  real magnitude into the bottom of the top panel: they are drawn as a separate
  marker on a line at the top of the panel, labelled with their count.
- The worst few nodes (`WORST_NAMED`, by finite error, the first failure aside)
  are numbered at their points and named in a list beside the panel, with their
  error; names are cut in the middle and kept unique (short_names.py). The first
  failure keeps its own arrow and label.
- Rows come from a `Localization` (`plot_rows_from_localization`): a node with
  several float outputs becomes one row with its largest magnitude and error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from trtpipe.safe_text import safe_text  # labels too: matplotlib warned "Glyph ... missing" for a control (issue 22)
from trtpipe.validate.localize import Localization
from trtpipe.validate.short_names import unique_short_names

FIGURE_SIZE = (13.0, 6.5)  # inches
DPI = 100
LOW_COLOUR, FP32_COLOUR, OTHER_COLOUR, FAILED_COLOUR = "tab:blue", "tab:orange", "tab:gray", "tab:red"
_LOW = ("fp16", "bf16")
# Fixed margins (legends sit in the right one): tight_layout would cost a second full draw.
_MARGINS = {"left": 0.065, "right": 0.78, "top": 0.93, "bottom": 0.08, "hspace": 0.08}
_LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": "small", "borderaxespad": 0.0}
ERROR_FLOOR = 1e-7
EXTREME_MAGNITUDE = 1e10
WORST_NAMED = 3
_NAME_WIDTH = 30  # characters of a node name in the list beside the error panel


def plot_rows_from_localization(
    localization: Localization, decisions_or_precision_by_node: Mapping | None = None
) -> list[dict]:
    """Rows {node, op_type, ref_max_abs, error, precision, failed}, one per node, topological order.

    `decisions_or_precision_by_node` maps node names to a `Decision` or a precision string (the
    plan); where it gives fp32/fp16/bf16 that is the row's precision, otherwise the precision the
    candidate's tensor actually has.
    """
    plan = decisions_or_precision_by_node or {}
    rows: list[dict] = []
    for entry in localization.tensors:
        error = math.inf if entry.cand_nonfinite else float(entry.relative_error)
        if rows and rows[-1]["node"] == entry.node:
            row = rows[-1]
            row["ref_max_abs"] = max(row["ref_max_abs"], float(entry.ref_max_abs))
            row["error"] = max(row["error"], error)
            row["failed"] = row["failed"] or entry.failed
            continue
        planned = plan.get(entry.node)
        planned = getattr(planned, "precision", planned)
        rows.append({
            "node": entry.node,
            "op_type": entry.op_type,
            "ref_max_abs": float(entry.ref_max_abs),
            "error": error,
            "precision": planned if planned in ("fp32", *_LOW) else entry.precision,
            "failed": bool(entry.failed),
        })
    return rows


def write_accuracy_plot(path: Path, rows: list[dict], **options) -> Path:
    """Write the two-panel PNG of the module docstring to `path`; returns `path`.

    `options` are those of `accuracy_figure`.
    """
    path = Path(path)
    figure = accuracy_figure(rows, **options)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", metadata={"Software": None}, pil_kwargs={"compress_level": 3})
    return path


def accuracy_figure(
    rows: list[dict],
    *,
    fp16_max: float = 65504.0,
    title: str,
    error_threshold: float | None = None,
    error_label: str = "relative error  max|cand - ref| / max|ref|",
    error_floor: float = ERROR_FLOOR,
):
    """The matplotlib `Figure` of the module docstring (Agg canvas; axes: top, bottom)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    x = np.arange(len(rows))
    magnitude = np.array([row["ref_max_abs"] for row in rows], dtype=np.float64)
    error = np.array([row["error"] for row in rows], dtype=np.float64)
    precision = np.array([row["precision"] for row in rows], dtype=object)
    failed = np.array([bool(row["failed"]) for row in rows], dtype=bool)
    groups = [
        (np.isin(precision, _LOW), LOW_COLOUR, "low precision (FP16/BF16)"),
        (precision == "fp32", FP32_COLOUR, "kept FP32"),
        (~np.isin(precision, (*_LOW, "fp32")), OTHER_COLOUR, "other (kept as authored, non-float)"),
    ]

    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw=_MARGINS)
    figure.suptitle(safe_text(title))
    size = 14.0 if len(rows) <= 300 else 6.0
    _draw_magnitudes(top, x, magnitude, groups, size, fp16_max)

    finite = np.isfinite(error)
    shown_error = np.where(finite, np.maximum(error, error_floor), np.nan)
    ceiling = np.nanmax(np.append(shown_error, error_threshold or np.nan))
    infinite_at = (ceiling if np.isfinite(ceiling) else 1.0) * 30.0
    shown_error[~finite] = infinite_at
    for mask, colour, label in groups:
        mask = mask & finite
        if mask.any():
            bottom.scatter(x[mask], shown_error[mask], s=size, color=colour, label=label, zorder=2)
    if failed.any():
        bottom.scatter(x[failed], shown_error[failed], s=60, facecolors="none", edgecolors=FAILED_COLOUR,
                       linewidths=1.2, label="failed (error above threshold)", zorder=3)
    if (~finite).any():
        bottom.scatter(x[~finite], shown_error[~finite], s=40, marker="^", color=FAILED_COLOUR,
                       label="inf/NaN", zorder=4)
        bottom.axhline(infinite_at, color=FAILED_COLOUR, linestyle=":", linewidth=0.8)
        bottom.annotate("inf/NaN", xy=(0.0, infinite_at), xycoords=("axes fraction", "data"), xytext=(4, 3),
                        textcoords="offset points", va="bottom", color=FAILED_COLOUR, fontsize="small")
    at_floor = finite & (error <= error_floor)
    if at_floor.any():
        zeros = int((finite & (error == 0)).sum())
        bottom.axhline(error_floor, color="0.6", linestyle=":", linewidth=0.8)
        bottom.annotate(f"{int(at_floor.sum())} node(s) with error <= {error_floor:g} drawn here "
                        f"({zeros} exactly 0)", xy=(0.0, error_floor), xycoords=("axes fraction", "data"),
                        xytext=(4, 3), textcoords="offset points", va="bottom", color="0.4", fontsize="small")
    if error_threshold is not None:
        bottom.axhline(error_threshold, color="0.4", linestyle="--", linewidth=1.0,
                       label=f"threshold {error_threshold:g}")
    bottom.set_yscale("log")
    lowest = np.nanmin(np.append(shown_error[finite], [error_threshold or np.nan, infinite_at]))
    bottom.set_ylim(lowest / 3.0, infinite_at * 4.0)  # never below the floor: no axis down to 1e-40
    bottom.set_ylabel(error_label)
    bottom.set_xlabel("node (topological order)")
    bottom.legend(**_LEGEND)

    # As in localize.py: the first non-finite node is named in preference to the first above the threshold.
    nonfinite = failed & ~finite
    first = int(np.argmax(nonfinite if nonfinite.any() else failed)) if failed.any() else None
    if first is not None:
        row = rows[first]
        for axis in (top, bottom):
            axis.axvline(first, color=FAILED_COLOUR, linestyle="--", linewidth=0.8, zorder=0)
        # Decision: named above the panel, not in it: a box among the points hid the numbered
        # worst nodes and the points themselves (issue 33, item 7); the dashed line marks the node.
        bottom.set_title(f"{'first inf/NaN' if nonfinite.any() else 'first failure'}: {safe_text(row['node'])} "
                         f"({safe_text(row['op_type'])}), node {first}, the dashed line",
                         loc="left", fontsize="small", color=FAILED_COLOUR)
    _name_worst(figure, bottom, rows, error, shown_error, error_floor, first)
    for axis in (top, bottom):
        axis.yaxis.set_minor_locator(NullLocator())  # log axes' minor ticks: hundreds of artists, no information
    if len(rows):
        bottom.set_xlim(-0.5, len(rows) - 0.5)
    return figure


def _draw_magnitudes(top, x, magnitude, groups, size, fp16_max) -> None:
    """The top panel; magnitudes above EXTREME_MAGNITUDE on their own marker line at the top."""
    extreme = np.isfinite(magnitude) & (magnitude > EXTREME_MAGNITUDE) | np.isinf(magnitude)
    shown = _floored(np.where(extreme, np.nan, magnitude))
    highest = np.nanmax(np.append(shown, fp16_max))
    extreme_at = highest * 30.0
    shown[extreme] = extreme_at
    top.plot(x, np.where(extreme, np.nan, shown), color="0.8", linewidth=0.8, zorder=1)
    for mask, colour, label in groups:
        mask = mask & ~extreme
        if mask.any():
            top.scatter(x[mask], shown[mask], s=size, color=colour, label=label, zorder=2)
    if extreme.any():
        top.scatter(x[extreme], shown[extreme], s=40, marker="^", color="0.3", zorder=3,
                    label=f"max |x| > {EXTREME_MAGNITUDE:g}")
        top.axhline(extreme_at, color="0.3", linestyle=":", linewidth=0.8)
        top.annotate(f"{int(extreme.sum())} node(s) with max |x| > {EXTREME_MAGNITUDE:g} (a mask constant?; "
                     f"largest {np.nanmax(magnitude[extreme]):.3g}) drawn here",
                     xy=(0.0, extreme_at), xycoords=("axes fraction", "data"), xytext=(4, -3),
                     textcoords="offset points", va="top", color="0.3", fontsize="small")
    top.axhline(fp16_max, color=FAILED_COLOUR, linestyle="--", linewidth=1.0, label=f"FP16 max {fp16_max:g}")
    top.set_yscale("log")
    top.set_ylim(top=extreme_at * 4.0)
    top.set_ylabel("reference max |x|")
    top.legend(**_LEGEND)


def worst_nodes(rows: list[dict], error: np.ndarray, error_floor: float, skip: int | None) -> list[int]:
    """Indices of the WORST_NAMED largest finite errors above the floor (not `skip`), worst first."""
    order = sorted((i for i in range(len(rows)) if np.isfinite(error[i]) and error[i] > error_floor and i != skip),
                   key=lambda i: (-error[i], i))
    return order[:WORST_NAMED]


def _label_heights(indices: list[int], count: int) -> dict[int, int]:
    """How many label rows up each numbered node's label goes: nodes closer than 2% of the axis
    (at least one node) stack their numbers instead of printing them over one another."""
    near = max(1.0, 0.02 * count)
    heights: dict[int, int] = {}
    for index in sorted(indices):
        taken = {heights[other] for other in heights if abs(other - index) <= near}
        heights[index] = min(level for level in range(len(indices) + 1) if level not in taken)
    return heights


def _name_worst(figure, bottom, rows, error, shown_error, error_floor, first) -> None:
    """Number the worst nodes at their points and list them beside the error panel."""
    worst = worst_nodes(rows, error, error_floor, first)
    if not worst:
        return
    names = unique_short_names((safe_text(rows[i]["node"]) for i in worst), _NAME_WIDTH)
    lines = ["largest errors:"]
    raised = _label_heights(worst, len(rows))
    for rank, index in enumerate(worst, start=1):
        bottom.annotate(str(rank), xy=(index, shown_error[index]), xytext=(0, 4 + 9 * raised[index]),
                        textcoords="offset points", ha="center", fontsize="small", fontweight="bold")
        lines += [f"{rank} {names[safe_text(rows[index]['node'])]}",
                  f"  {safe_text(rows[index]['op_type'])}, error {error[index]:.3g}"]
    figure.text(_MARGINS["right"] + 0.01, _MARGINS["bottom"], "\n".join(lines), fontsize="small",
                va="bottom", ha="left", family="monospace")


def _floored(values: np.ndarray) -> np.ndarray:
    """Values for a log axis: zeros at a floor a decade below the smallest positive value; NaN stays."""
    values = np.array(values, dtype=np.float64)
    positive = values[np.isfinite(values) & (values > 0)]
    floor = float(positive.min()) / 10.0 if positive.size else 1e-12
    values[np.isfinite(values) & (values <= 0)] = floor
    return values
