"""The pipeline's stages as a diagram (docs/img/pipeline.svg), drawn from the code, not by hand.

Every box is a stage class of `trtpipe.stages.STAGES`, in `STAGE_ORDER`: its name, the first
sentence of its module's docstring, and the artifact kinds it consumes and produces (its
`consumes`, `optional_consumes` in brackets, `produces`). A stage that the default `stages` list of
conf/config.yaml leaves out is drawn dashed ("optional"). So a new stage, a renamed artifact or a
changed default shows up in the picture when `python -m bench.docs_site` runs again, and
tests/test_docs_figures_current.py fails until it has.

Layout: two rows of three boxes read left to right (the page is narrower than six boxes), the
second row continuing the first; under the boxes, the cache every stage goes through.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from bench.docs_site.svg import CAST_FILL, CAST_STROKE, FP16_FILL, FP16_STROKE, arrow, box, document, wrap
from trtpipe.config.stage_order import STAGE_ORDER
from trtpipe.stages import STAGES

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN, PER_ROW = 210, 160, 32, 44, 8, 3  # 710 px: the page width, no scaling
WRAP = 29


def stage_facts(repo: Path) -> list[dict]:
    defaults = yaml.safe_load((repo / "conf" / "config.yaml").read_text())["stages"]
    facts = []
    for name in STAGE_ORDER:
        stage = STAGES[name]
        doc = (sys.modules[stage.__module__].__doc__ or "").strip()
        summary = " ".join(doc.split()).replace("`", "")
        summary = summary.split(": ", 1)[1] if summary.startswith(f"{name}: ") else summary
        summary = summary.split(". ")[0].rstrip(".")
        summary = re.sub(r" \([^)]*\)", "", summary)  # asides in parentheses: the box has room for the gist
        reads = list(stage.consumes) + [f"({kind})" for kind in getattr(stage, "optional_consumes", ())]
        facts.append({"name": name, "summary": summary, "reads": reads, "writes": list(stage.produces),
                      "optional": name not in defaults})
    return facts


def draw(repo: Path) -> str:
    facts = stage_facts(repo)
    rows = (len(facts) + PER_ROW - 1) // PER_ROW
    width = 2 * MARGIN + PER_ROW * BOX_W + (PER_ROW - 1) * GAP_X
    cache_y = MARGIN + rows * BOX_H + (rows - 1) * GAP_Y + 30
    height = cache_y + 48 + MARGIN
    body = []
    corners = []
    for i, fact in enumerate(facts):
        row, col = divmod(i, PER_ROW)
        x, y = MARGIN + col * (BOX_W + GAP_X), MARGIN + row * (BOX_H + GAP_Y)
        corners.append((x, y))
        summary = wrap(fact["summary"], WRAP)
        if len(summary) > 6:
            summary = summary[:6]
            summary[-1] += " …"
        lines = [(fact["name"] + ("  (optional)" if fact["optional"] else ""), "bold"),
                 *[(line, "") for line in summary],
                 *[(line, "small") for line in wrap("reads: " + ", ".join(fact["reads"]), 36)],
                 *[(line, "small") for line in wrap("writes: " + ", ".join(fact["writes"]), 36)]]
        body.append(box(x, y, BOX_W, BOX_H, lines, fill=CAST_FILL if fact["optional"] else FP16_FILL,
                        stroke=CAST_STROKE if fact["optional"] else FP16_STROKE, dashed=fact["optional"]))
    for (x0, y0), (x1, y1) in zip(corners, corners[1:]):
        if y0 == y1:  # same row: straight across
            body.append(arrow([(x0 + BOX_W, y0 + BOX_H / 2), (x1 - 2, y1 + BOX_H / 2)]))
        else:  # next row: down from the row's last box, back to its first
            mid = y0 + BOX_H + GAP_Y / 2
            body.append(arrow([(x0 + BOX_W / 2, y0 + BOX_H), (x0 + BOX_W / 2, mid), (x1 + BOX_W / 2, mid),
                               (x1 + BOX_W / 2, y1 - 2)]))
    body.append(box(MARGIN, cache_y, width - 2 * MARGIN, 44,
                    [("the cache: every stage's outputs, keyed by its config, input digests, version and tools",
                      ""),
                     ("an identical stage is 'cached'; a changed one re-runs and says which key changed", "small")],
                    fill="#f5f5f5", stroke="#999999"))
    return document(width, height, body, "trtpipe's stages, in order, with what each reads and writes")
