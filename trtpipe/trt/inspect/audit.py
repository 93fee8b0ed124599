"""The precision audit: for every node the plan keeps in FP32, what precision the engine runs.

Decisions:
- A node is carried by the engine layers whose metadata lists it (a fused or Myelin
  layer lists every node it swallowed), or, without metadata, by the layer named
  `<node>` or `<node>_<N>` (see trtpipe.trt.inspect.layer_names).
- Where the node's own output tensor survives as a layer output, its data type is the
  realised precision (ground truth). Inside a fusion that tensor is gone; the realised
  precision is then that of the carrying layer's float inputs and outputs — for a
  Myelin ForeignNode that swallowed an FP32 LayerNorm, the ForeignNode's. This is
  conservative: a fusion with only FP16 I/O is reported as a violation even though
  TensorRT may compute the inside in FP32, because nothing in the engine proves it did.
- Verdicts: `ok` (FP32 seen, no low precision), `mixed` (both seen, inside a fusion:
  reported, not a violation), `violation` (only low precision seen), `absent` (no
  layer carries the node: folded away or fused without metadata; reported, not a
  violation), `unknown` (carried, but no float type is visible).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass

from trtpipe.trt.inspect.inspector_json import FLOAT_DTYPES, LOW_DTYPES, EngineInfo, EngineLayer
from trtpipe.trt.inspect.layer_names import layer_mapper

AUDIT_FORMAT = 1
AUDITED_PRECISIONS = ("fp32",)


@dataclass(frozen=True)
class AuditRow:
    node: str
    op_type: str
    planned: str
    realised: str  # fp32, fp16, mixed(fp16+fp32), absent, unknown
    engine_layer: str  # the carrying layer names, joined by " | "
    fused: bool
    verdict: str  # ok, mixed, violation, absent, unknown
    evidence: str  # which tensors or layers the realised precision was read from


def audit_engine(plan: Mapping, engine: EngineInfo, node_outputs: Mapping[str, Sequence[str]] | None = None,
                 tensors: Collection[str] | None = None) -> list[AuditRow]:
    """One row per plan node planned in FP32, in plan order. `tensors`: the model's tensor and
    initializer names (a layer named after one is not `<node>_<N>`); by default the node outputs."""
    planned = [n for n in plan.get("nodes", []) if n.get("precision") in AUDITED_PRECISIONS]
    names = {n["name"] for n in plan.get("nodes", [])}
    if tensors is None:
        tensors = {t for outputs in (node_outputs or {}).values() for t in outputs}
    mapped = layer_mapper(names, set(tensors))
    carriers: dict[str, list[EngineLayer]] = {}
    for layer in engine.layers:
        for node in mapped(layer.name, layer.metadata):
            carriers.setdefault(node, []).append(layer)
    produced = {t.name: t.dtype for layer in engine.layers for t in layer.outputs}
    return [_row(n, carriers.get(n["name"], []), produced, (node_outputs or {}).get(n["name"], ()))
            for n in planned]


def _row(node: Mapping, layers: list[EngineLayer], produced: Mapping[str, str | None],
         outputs: Sequence[str]) -> AuditRow:
    name, planned = node["name"], node["precision"]
    common = dict(node=name, op_type=node.get("op_type", ""), planned=planned,
                  engine_layer=" | ".join(layer.name for layer in layers),
                  fused=any(layer.fused for layer in layers))
    if not layers:
        return AuditRow(**common, realised="absent", verdict="absent", evidence="no engine layer carries this node")
    own = {t: produced[t] for t in outputs if produced.get(t) in FLOAT_DTYPES}
    if own:
        dtypes = sorted(set(own.values()))
        evidence = "node output(s) " + ", ".join(f"{t}:{d}" for t, d in own.items())
    else:
        dtypes = sorted({d for layer in layers for d in layer.float_dtypes()})
        evidence = "float I/O of " + ", ".join(f"{layer.name}:{'+'.join(layer.float_dtypes()) or '-'}"
                                              for layer in layers)
    low = [d for d in dtypes if d in LOW_DTYPES]
    if not dtypes:
        realised, verdict = "unknown", "unknown"
    elif not low:
        realised, verdict = "+".join(dtypes), "ok"
    elif len(low) == len(dtypes):
        realised, verdict = "+".join(dtypes), "violation"
    else:
        realised = f"mixed({'+'.join(dtypes)})"
        verdict = "violation" if own else "mixed"
    return AuditRow(**common, realised=realised, verdict=verdict, evidence=evidence)


def audit_document(rows: Sequence[AuditRow], engine: EngineInfo) -> dict:
    violations = [row.node for row in rows if row.verdict == "violation"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    return {
        "format": AUDIT_FORMAT,
        "inspector_schema": engine.schema,
        "rows": [asdict(row) for row in rows],
        "violations": violations,
        "totals": {"audited": len(rows), **dict(sorted(counts.items()))},
    }


def audit_table(rows: Sequence[AuditRow], max_width: int = 48) -> str:
    """The console table: node, planned, realised, engine layer, fused, verdict."""
    header = ("node", "planned", "realised", "engine layer", "fused", "verdict")
    body = [(_clip(r.node, max_width), r.planned, r.realised, _clip(r.engine_layer or "-", max_width),
             "yes" if r.fused else "no", r.verdict) for r in rows]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()
             for cells in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    violations = sum(r.verdict == "violation" for r in rows)
    lines.append(f"{len(rows)} FP32 node(s) audited, {violations} violation(s)"
                 + (" - these nodes run in low precision in the engine" if violations else ""))
    return "\n".join(lines) + "\n"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
