"""precision_audit.json of a TensorRT-RTX build: the types the real parser gave each FP32 node.

Decisions:
- The evidence is the parser's own log (`nv_detailed_build_log=1`, trtpipe.trt.rtx.parser_log),
  not engine layers: TensorRT-RTX fuses the whole graph into one Myelin `ForeignNode`, so the
  engine says nothing per node (issue 23). What the parser logged is what the strongly typed
  network carries into the builder; the kernels inside the fusion are not observable here.
- One row per plan node planned `fp32` (the nodes the plan protects), with every logged input
  and output as `[tensor, TYPE]` (TensorRT's names: FLOAT, HALF, BF16, INT64...). Verdicts:
  `ok` (every tensor the plan governs is FLOAT, the rest as written), `violation` (the parser
  gave a governed tensor another type: the plan was not carried into the network), `absent`
  (the parser logged no such node: a Constant, which ONNX Runtime hands over as an initializer,
  or a node of a subgraph body). Which tensors the plan governs: trtpipe.trt.rtx.plan_compare.
- The same `violations` list and `build.audit=error` meaning as the TensorRT engine audit.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtpipe.trt.rtx.parser_log import ParserLog

AUDIT_FORMAT = 1
SOURCE = "TensorRT-RTX ONNX parser log (nv_detailed_build_log=1)"


def parser_audit(plan: Mapping, model, log: ParserLog, facts: Mapping) -> dict:
    """The audit document. `model`: the ONNX the EP compiled (loaded without weights)."""
    from trtpipe.trt.rtx.plan_compare import PLANNED, node_problems, opsets, written_types

    types, opset = written_types(model), opsets(model)
    by_name = {node.name: node for node in model.graph.node}
    rows = []
    for entry in plan.get("nodes", []):
        if entry.get("precision") != "fp32":
            continue
        node = by_name.get(entry["name"])
        logged = log.nodes.get(entry["name"])
        row = {"node": entry["name"], "op_type": entry.get("op_type", ""), "planned": "fp32",
               "inputs": [list(t) for t in logged.inputs] if logged else [],
               "outputs": [list(t) for t in logged.outputs] if logged else []}
        if node is None or logged is None:
            why = ("a Constant: ONNX Runtime hands it to the EP as an initializer" if entry.get("op_type") == "Constant"
                   else "not in the main graph (a subgraph body's node)" if node is None
                   else "the parser logged no such node")
            rows.append({**row, "verdict": "absent", "evidence": why})
            continue
        problems = node_problems(node, log, types, opset, PLANNED["fp32"])
        rows.append({**row, "verdict": "violation" if problems else "ok",
                     "evidence": "; ".join(problems) if problems else "every governed float tensor parsed FLOAT"})
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return {
        "format": AUDIT_FORMAT,
        "source": SOURCE,
        "environment": dict(facts),
        "rows": rows,
        "violations": [row["node"] for row in rows if row["verdict"] == "violation"],
        "totals": {"audited": len(rows), "parsed_nodes": len(log.nodes), **dict(sorted(counts.items()))},
    }


def audit_table(rows: Sequence[Mapping], max_width: int = 48) -> str:
    """The console table: node, op, parsed input and output types, verdict."""
    header = ("node", "op", "parsed inputs", "parsed outputs", "verdict")
    body = [(_clip(r["node"], max_width), r["op_type"], _types(r["inputs"]), _types(r["outputs"]), r["verdict"])
            for r in rows]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()
             for cells in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    violations = sum(r["verdict"] == "violation" for r in rows)
    lines.append(f"{len(rows)} FP32 node(s) audited against the TensorRT-RTX parser's log, {violations} violation(s)"
                 + (" - the parser typed these nodes other than the plan" if violations else ""))
    return "\n".join(lines) + "\n"


def _types(tensors: Sequence[Sequence[str]]) -> str:
    return ",".join(t[1] for t in tensors) or "-"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
