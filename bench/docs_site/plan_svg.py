"""A precision plan drawn on a small graph (docs/img/precision-plan.svg), from a real run's files.

Input: a run's `precision/model.onnx` (the mixed-precision model, Casts included) and
`precision/precision_plan.json` (each node's precision and reason). Drawn: the first `count`
nodes of the model in its (topological) order and the graph inputs they read, top to bottom by
depth; a node's fill is its planned precision (FP16 blue, FP32 orange), a Cast trtpipe placed is
grey and says which type it casts to; an edge is coloured by the type of the tensor it carries.
Every node keeps its reason as a tooltip (`<title>`). Weights and constants are not drawn.

Decisions:
- the window is "the first N nodes" of the file, a rule that holds for any model (no rule keyed to
  a model's node names); the docs script picks N for the picture it wants;
- the depth of a node is its longest path from the window's inputs, so every edge points down;
  nodes of one depth sit side by side in file order: stable output for the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from bench.docs_site.svg import (CAST_FILL, CAST_STROKE, FP16_FILL, FP16_STROKE, FP32_FILL, FP32_STROKE, arrow,
                                 bend, box, document, label)

NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN, LEGEND_W = 200, 34, 24, 22, 16, 250
_FILL = {"fp16": (FP16_FILL, FP16_STROKE), "fp32": (FP32_FILL, FP32_STROKE)}
_TYPE = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.FLOAT: "fp32"}


def _short(name: str) -> str:
    """The last part of a node name (`/encoders.0/norm1/Pow` -> `norm1/Pow`)."""
    parts = [p for p in name.split("/") if p]
    return "/".join(parts[-2:]) if parts else name


def draw(model_path: Path, plan_path: Path, count: int, title: str) -> str:
    model = onnx.load(str(model_path), load_external_data=False)
    plan = {node["name"]: node for node in json.loads(plan_path.read_text())["nodes"]}
    nodes = list(model.graph.node)[:count]
    inputs = {i.name: _TYPE.get(i.type.tensor_type.elem_type, "other") for i in model.graph.input}
    producer: dict[str, int] = {}
    kinds: dict[str, str] = dict(inputs)  # tensor -> fp16 / fp32 / other
    items: list[dict] = []
    for name, kind in inputs.items():
        if any(name in n.input for n in nodes):
            producer[name] = len(items)
            items.append({"lines": [(f"input {name}", "bold"), (kind.upper(), "small")], "kind": kind,
                          "tooltip": f"graph input {name}", "reads": []})
    for node in nodes:
        if node.op_type == "Cast" and node.name not in plan:
            to = next(a.i for a in node.attribute if a.name == "to")
            kind = _TYPE.get(to, "other")
            entry = {"lines": [(f"Cast to {kind.upper()}", "bold"), ("placed by trtpipe", "small")], "kind": "cast",
                     "tooltip": f"{node.name}: Cast to {kind}"}
        else:
            decided = plan.get(node.name, {})
            kind = decided.get("precision", "other")
            entry = {"lines": [(f"{node.op_type}  {kind.upper()}", "bold"), (_short(node.name), "small")],
                     "kind": kind, "tooltip": f"{node.name}: {kind}, {decided.get('reason', 'not in the plan')}"}
        entry["reads"] = [(producer[t], kinds.get(t, "other")) for t in node.input if t in producer]
        for out in node.output:
            producer[out] = len(items)
            kinds[out] = kind
        items.append(entry)
    depth = []
    for item in items:
        depth.append(1 + max((depth[src] for src, _ in item["reads"]), default=-1))
    layers: dict[int, list[int]] = {}
    for index, d in enumerate(depth):
        layers.setdefault(d, []).append(index)
    widest = max(len(members) for members in layers.values())
    graph_w = widest * NODE_W + (widest - 1) * GAP_X
    width = 2 * MARGIN + graph_w + LEGEND_W
    top = MARGIN + 22
    height = top + len(layers) * (NODE_H + GAP_Y) - GAP_Y + MARGIN
    where = {}
    for d, members in layers.items():
        row_w = len(members) * NODE_W + (len(members) - 1) * GAP_X
        for k, index in enumerate(members):
            where[index] = (MARGIN + (graph_w - row_w) / 2 + k * (NODE_W + GAP_X), top + d * (NODE_H + GAP_Y))
    body = [label(MARGIN, MARGIN + 6, title, bold=True)]
    for index, item in enumerate(items):
        x, y = where[index]
        for src, kind in item["reads"]:
            sx, sy = where[src]
            colour = {"fp16": FP16_STROKE, "fp32": FP32_STROKE}.get(kind, CAST_STROKE)
            marker = kind if kind in ("fp16", "fp32") else "grey"
            span = depth[index] - depth[src]
            if span > 1 and sx == x:  # skips rows in one column: beside the chain, not over it
                body.append(bend((sx + NODE_W, sy + NODE_H / 2), (x + NODE_W, y + NODE_H / 2), 20 + 12 * span,
                                 colour=colour, marker=marker))
            else:
                body.append(arrow([(sx + NODE_W / 2, sy + NODE_H), (x + NODE_W / 2, y - 1)], colour=colour,
                                  marker=marker))
    for index, item in enumerate(items):
        x, y = where[index]
        fill, stroke = _FILL.get(item["kind"], (CAST_FILL, CAST_STROKE))
        body.append(box(x, y, NODE_W, NODE_H, item["lines"], fill=fill, stroke=stroke,
                        radius=3 if item["kind"] == "cast" else 8, tooltip=item["tooltip"]))
    lx = width - LEGEND_W + 8
    legend = [("FP16 node", FP16_FILL, FP16_STROKE), ("FP32 node (kept)", FP32_FILL, FP32_STROKE),
              ("Cast placed by trtpipe", CAST_FILL, CAST_STROKE)]
    for k, (text, fill, stroke) in enumerate(legend):
        y = top + k * 26
        body.append(box(lx, y, 22, 16, [], fill=fill, stroke=stroke, radius=3))
        body.append(label(lx + 30, y + 12, text))
    y = top + len(legend) * 26 + 8
    body.append(label(lx, y, "edges: the tensor's type", size=11, colour="#555555"))
    body.append(arrow([(lx, y + 14), (lx + 40, y + 14)], colour=FP16_STROKE, marker="fp16"))
    body.append(label(lx + 48, y + 18, "FP16", size=11))
    body.append(arrow([(lx, y + 32), (lx + 40, y + 32)], colour=FP32_STROKE, marker="fp32"))
    body.append(label(lx + 48, y + 36, "FP32", size=11))
    return document(width, height, body, title)
