"""precision_audit.json of a TensorRT-RTX build: the types the real parser gave every plan node.

Decisions:
- The evidence is the parser's own log (`nv_detailed_build_log=1`, trtpipe.trt.rtx.parser_log),
  not engine layers: TensorRT-RTX fuses the whole graph into one Myelin `ForeignNode`, so the
  engine says nothing per node (issue 23). What the parser logged is what the strongly typed
  network carries into the builder; the kernels inside the fusion are not observable here.
- One row per plan node, If/Loop/Scan bodies included (issue 32, items 15 and 17: the parser
  logs body nodes under their own names; `graph` says which body), with every logged input and
  output as `[tensor, TYPE]` (TensorRT's names: FLOAT, HALF, BF16, INT64...). Which tensors the
  plan governs: trtpipe.trt.rtx.plan_compare. Verdicts:
  - `ok`: every governed tensor has the planned type, the rest the written one.
  - `violation`: a node planned FP32 with a tensor typed otherwise: the plan's protection was not
    carried into the network (an accuracy risk).
  - `widened`: a node planned FP16/BF16 whose governed tensor the parser typed FLOAT: it runs in
    FP32, a silent speed loss. A finding of its own kind: the engine is as accurate as planned.
  - `mismatch`: any other type that is neither the plan's nor the written one.
  - `absent`: the parser logged no such node (issue 32, item 16): nothing shows what it runs in,
    so it is a finding, never a pass.
  - `initializer`: a Constant; ONNX Runtime hands it to the EP as an initializer, so the parser
    logs no node; its type is checked where a node reads it. Not a finding.
  - `removed`: an authored Cast the precision stage removed as redundant, by the plan's own
    record (`redundant_casts`); the model does not hold it. Not a finding. (Found by the oracle:
    the built-in mixed_precision model and silero_vad list such Casts.)
- A log with no per-node line at all is an error (`error`), never "0 violations": then nothing
  was audited (the build stage fails on it).
- `violations` keeps its meaning (the planned-FP32 nodes typed lower, as the TensorRT engine
  audit's); `findings` lists every row that is not `ok`/`initializer`, by verdict.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtpipe.safe_text import safe_text
from trtpipe.trt.rtx.parser_log import ParserLog

AUDIT_FORMAT = 2
SOURCE = "TensorRT-RTX ONNX parser log (nv_detailed_build_log=1)"
FINDINGS = ("violation", "mismatch", "absent", "widened")   # in order of concern
# What each finding means, for the table's last line and the stage's summary.
MEANING = {"violation": "planned FP32, typed lower (accuracy)", "mismatch": "typed neither as planned nor as written",
           "absent": "not in the parser's log (unchecked)", "widened": "planned FP16, parsed FLOAT (runs FP32: slower)"}
NO_NODE_LINES = ("the TensorRT-RTX parser's log holds no per-node line (`[Op] inputs: ...`), so no node could be "
                 "audited; the build ran with nv_detailed_build_log=1 and ONNX Runtime's log at WARNING, which "
                 "give them: see build/build.log")


def parser_audit(plan: Mapping, model, log: ParserLog, facts: Mapping) -> dict:
    """The audit document. `model`: the ONNX the EP compiled (loaded without weights)."""
    from trtpipe.trt.rtx.plan_compare import model_nodes, opsets, removed_casts, written_types

    types, opset, nodes = written_types(model), opsets(model), model_nodes(model)
    gone = removed_casts(plan)
    rows = [_row(entry, nodes.get(entry["name"]), log, types, opset, entry["name"] in gone)
            for entry in plan.get("nodes", [])]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    document = {
        "format": AUDIT_FORMAT,
        "source": SOURCE,
        "environment": dict(facts),
        "rows": rows,
        "violations": [row["node"] for row in rows if row["verdict"] == "violation"],
        "findings": {kind: [row["node"] for row in rows if row["verdict"] == kind] for kind in FINDINGS},
        "totals": {"audited": len(rows), "in_bodies": sum(bool(row["graph"]) for row in rows),
                   "parsed_nodes": len(log.nodes), **dict(sorted(counts.items()))},
    }
    if not log.nodes:
        document["error"] = NO_NODE_LINES
    return document


def _row(entry: Mapping, found, log: ParserLog, types: dict, opset: dict, removed: bool) -> dict:
    from trtpipe.trt.rtx.plan_compare import PLANNED, type_problems

    name, precision = entry["name"], entry.get("precision", "")
    logged = log.nodes.get(name)
    row = {"node": name, "op_type": entry.get("op_type", ""), "planned": precision,
           "graph": found[1] if found else "",
           "inputs": [list(t) for t in logged.inputs] if logged else [],
           "outputs": [list(t) for t in logged.outputs] if logged else []}
    if entry.get("op_type") == "Constant" or (found and found[0].op_type == "Constant"):
        return {**row, "verdict": "initializer",
                "evidence": "a Constant: ONNX Runtime hands it to the EP as an initializer (checked where it is read)"}
    if found is None and removed:
        return {**row, "verdict": "removed", "evidence": "an authored Cast the precision stage removed as redundant "
                                                          "(precision_plan.json's redundant_casts)"}
    if found is None:
        return {**row, "verdict": "absent", "evidence": "not in the compiled model"}
    if logged is None:
        return {**row, "verdict": "absent", "evidence": "the parser logged no such node"}
    planned = PLANNED.get(precision)
    problems = type_problems(found[0], log, types, opset, planned)
    if not problems:
        return {**row, "verdict": "ok", "evidence": "every tensor parsed as planned or as written"}
    evidence = "; ".join(str(p) for p in problems)
    if planned == "FLOAT":
        verdict = "violation"
    elif planned in ("HALF", "BF16") and all(p.governed and p.parsed == "FLOAT" for p in problems):
        verdict = "widened"
    else:
        verdict = "mismatch"
    return {**row, "verdict": verdict, "evidence": evidence}


def audit_table(document: Mapping, max_width: int = 48) -> str:
    """The console table: the findings (node, op, where, parsed input and output types, verdict), then
    one line of totals. Every row, findings or not, is in precision_audit.json."""
    rows = [r for r in document["rows"] if r["verdict"] in FINDINGS]
    rows.sort(key=lambda r: FINDINGS.index(r["verdict"]))
    totals = document["totals"]
    counts = ", ".join(f"{totals.get(kind, 0)} {kind}" for kind in ("ok", *FINDINGS))
    last = (f"{totals['audited']} plan node(s) audited against the TensorRT-RTX parser's log "
            f"({totals['in_bodies']} in If/Loop/Scan bodies): {counts}")
    meanings = "; ".join(f"{kind}: {MEANING[kind]}" for kind in FINDINGS if totals.get(kind))
    lines = []
    if rows:
        header = ("node", "op", "graph", "parsed inputs", "parsed outputs", "verdict")
        body = [(_clip(r["node"], max_width), r["op_type"], _clip(r["graph"] or "main", max_width),
                 _types(r["inputs"]), _types(r["outputs"]), r["verdict"]) for r in rows]
        widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()
                 for cells in [header, *body]]
        lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(last + (f" ({meanings})" if meanings else ""))
    if document.get("error"):
        lines.append(f"error: {document['error']}")
    return "\n".join(lines) + "\n"


def _types(tensors: Sequence[Sequence[str]]) -> str:
    return ",".join(t[1] for t in tensors) or "-"


def _clip(text: str, width: int) -> str:
    """Names are data: escaped first (trtpipe/safe_text.py), then shortened."""
    text = safe_text(text)
    return text if len(text) <= width else "..." + text[-(width - 3):]
