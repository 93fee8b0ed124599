"""The console lines of `trtpipe-inspect` from its report (the same dict `--json` prints).

Decision: the op histogram is printed in full (most frequent first), wrapped between items,
like Polygraphy's op summary; finding lists are capped (`SHOWN`) with the count always complete.
"""

from __future__ import annotations

SHOWN = 5


def _mb(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count / 1e3:.1f} kB"


def _value(entry: dict) -> str:
    shape = "rank unknown" if entry["shape"] is None else "[" + ", ".join(map(str, entry["shape"])) + "]"
    dynamic = f"  (dynamic: {', '.join(entry['dynamic'])})" if entry["dynamic"] else ""
    return f"    {entry['name']:<28} {entry['type']:<9} {shape}{dynamic}"


def report_lines(report: dict) -> list[str]:
    model = report["model"]
    lines = [f"trtpipe-inspect: {model['path']} ({_mb(model['file_bytes'])})",
             f"  graph {model['name']!r}: opset {model['opset']}, IR version {model['ir_version']}, "
             f"producer {model['producer'] or 'not recorded'}"
             + (f"; other domains {', '.join(f'{d} {v}' for d, v in model['opsets'].items() if d not in ('', 'ai.onnx'))}"
                if len(model["opsets"]) > 1 else "")]
    lines.append(f"  inputs ({len(model['inputs'])}):")
    lines += [_value(entry) for entry in model["inputs"]]
    lines.append(f"  outputs ({len(model['outputs'])}):")
    lines += [_value(entry) for entry in model["outputs"]]
    inner = model["nodes_with_subgraphs"] - model["nodes"]
    lines.append(f"  nodes: {model['nodes']}" + (f" (+{inner} in subgraphs)" if inner else "")
                 + f", {len(model['op_histogram'])} op types:")
    lines += _wrapped([f"{op} {n}" for op, n in model["op_histogram"].items()])
    weights = model["weights"]
    external = "; ".join(f"{name}: {e['tensors']} tensors, {_mb(e['bytes'])}"
                         for name, e in weights["external_files"].items())
    lines.append(f"  weights: {weights['initializers']} initializers, {_mb(weights['bytes'])}"
                 + (f"; external data: {external}" if external else "; no external data"))
    if model["local_functions"]:
        lines.append(f"  model-local functions: {', '.join(model['local_functions'])}")
    subgraphs = model["subgraphs"]
    lines.append(f"  control flow: {len(subgraphs)} subgraph(s)" + ("" if not subgraphs else ": " + ", ".join(
        f"{s['op_type']} {s['node']}.{s['body']} ({s['nodes']} nodes)" for s in subgraphs[:SHOWN])
        + (", ..." if len(subgraphs) > SHOWN else "")))
    lines.append("  authored precision: " + _authored(model["authored"]))
    lines += _stage_lines(report)
    return lines


def _wrapped(items: list[str], width: int = 100) -> list[str]:
    """Comma-separated items on lines of at most `width` columns, never splitting an item ("If 1")."""
    lines = ["    "]
    for item in items:
        if len(lines[-1]) > 4 and len(lines[-1]) + len(item) + 2 > width:
            lines.append("    ")
        lines[-1] += ("" if len(lines[-1]) == 4 else " ") + item + ","
    lines[-1] = lines[-1].rstrip(",")
    return [line.rstrip() for line in lines]


def _authored(authored: dict) -> str:
    parts = []
    for kind, counts in (("weights", authored["low_precision_weights"]), ("Casts to", authored["casts_to_low_precision"])):
        parts += [f"{n} {kind} {t.upper()}" if kind == "Casts to" else f"{n} {t.upper()} {kind}"
                  for t, n in counts.items()]
    if authored["low_precision_io"]:
        parts.append(f"low-precision I/O {', '.join(authored['low_precision_io'])}")
    low = ", ".join(parts) if parts else "FP32 only (no FP16/BF16 weights, Casts or I/O)"
    qdq = authored["qdq"]
    if qdq:
        codes = ", ".join(authored["quantized_code_types"]) or "types not stated"
        return f"{low}; Q/DQ: " + ", ".join(f"{n} {op}" for op, n in qdq.items()) + f" ({codes} codes)"
    return f"{low}; no Q/DQ"


def _stage_lines(report: dict) -> list[str]:
    stages = report["stages"]
    sanitize, upgrade, precision, parser = stages["sanitize"], stages["upgrade_opset"], stages["precision"], \
        stages["parser"]
    lines = ["  what the stages would do (defaults; nothing runs):",
             f"    sanitize       {sanitize['constants_lowered']} Constant nodes lowered, at least "
             f"{sanitize['nodes_foldable_at_least']} nodes folded (static shape computations not counted)"]
    line = f"    upgrade_opset  opset {upgrade['opset']} -> {upgrade['target']}" if upgrade["converts"] else \
        f"    upgrade_opset  stays at opset {upgrade['opset']} (target {upgrade['target']})"
    if "error" in upgrade:
        line += f"; would stop: {upgrade['error']}"
    elif "skipped" in upgrade.get("layernorm", {}):
        line += f"; no LayerNorm fusion: {upgrade['layernorm']['skipped']}"
    else:
        norm = upgrade["layernorm"]
        line += f", {norm['fused']} LayerNorm fused ({norm['nodes_absorbed']} nodes), {len(norm['refused'])} refused"
        line += "".join(f"; {r['anchor']}: {r['reason']}" for r in norm["refused"][:2])
    lines.append(line)
    ranges = precision["integer_ranges"]
    needs = []
    if precision["integer_ranges_needed"]:
        needs.append("a range for integer input(s) " + ", ".join(precision["integer_ranges_needed"])
                     + " (data.inputs.<name>.low/high, or data.path)")
    if precision["shapes_needed"]:
        needs.append("a concrete shape for " + ", ".join(precision["shapes_needed"])
                     + " (data.inputs.<name>.shape, or data.path)")
    lines.append("    precision      sample inputs without data.path: floats from [0, 1)"
                 + "".join(f"; {name} integers in [{r['low']}, {r['high']})" for name, r in ranges.items()))
    lines += [f"                   {name}: {r['reason']}" for name, r in ranges.items()]
    lines += [f"                   needs {need}" for need in needs] or [
        "                   needs nothing more: every input can be drawn"]
    findings = parser["findings"]
    verdict = (f"{len(parser['errors'])} op(s) the parser cannot import, {len(parser['warnings'])} warning(s)"
               if findings else "every op has an importer")
    opset = parser["opset"]
    lines.append(f"    parser check   TensorRT {parser['tensorrt_version']}'s ONNX parser list: {verdict}"
                 + ("" if opset["inside"] else f"; opset {opset['model']} is outside its range "
                    f"{opset['supported_range']}"))
    for finding in findings[:SHOWN]:
        shown = ", ".join(finding["nodes"][:2]) + (", ..." if finding["count"] > 2 else "")
        lines.append(f"      {finding['severity']:<8} {finding['op']} ({finding['count']} node(s): {shown}): "
                     f"{finding['reason']}")
    if len(findings) > SHOWN:
        lines.append(f"      ... {len(findings) - SHOWN} more (--json lists every one)")
    return lines
