"""Does TensorRT's ONNX parser take each node in the precision the plan gives it? Checked on the CPU.

The parser's operator list (trtpipe/trt/parser/onnx_parser_ops/<version>.json, from onnx-tensorrt
docs/operators.md "Supported ONNX Types") gives, per op, the data types its importer takes.
A strongly typed network runs each node in the types its inputs carry, which the mixed
ONNX sets from the plan; so a node the plan puts in FP16/BF16 whose op lists no such
type (BF16 `GridSample`, `NonZero`, `RoiAlign`, `NonMaxSuppression`, `Mish`, FP16
`STFT` on 10.16/11.1) is one TensorRT will refuse or run otherwise than planned.

Decisions:
- Only nodes planned fp16/bf16 whose op has an importer and a type list are checked;
  fp32 is in every float op's list, `keep` means "as authored" (the plan changed nothing).
  Not DequantizeLinear: its list gives input types, its plan its output type (qdq_types.py,
  which checks its input type instead).
- A finding is a warning in build/parser_support.json (`plan_precision`) and one log
  line, not an error: the list documents what the importer is tested with, and some
  importers cast; the rule to pin such ops in FP32 is printed with it.
- For TensorRT 11 and later the real parser's measured verdicts (trtpipe/trt/parser/measured.py,
  TensorRT-RTX 1.7.1) correct the documentation: a type the list omits but the real parser
  built is no finding (recorded by `measured_overrides`: BF16 GridSample/NonZero, FP16/BF16
  STFT were built); a type the list gives but the real parser refused while it built the op in
  FP32 is one (BF16 ConvTranspose, GRU, HardSwish, LpNormalization; FP16/BF16 Celu, Range), with the
  measured reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from trtpipe.trt.parser.parser_ops import ParserOps
from trtpipe.trt.parser.qdq_types import OUTPUT_NOT_LISTED

PLAN_TYPES = {"fp16": "FP16", "bf16": "BF16"}
NODES_LISTED = 20


def _verdict(op_type: str, wanted: str, entry: Mapping, table: ParserOps) -> tuple[str, str] | None:
    """(evidence, reason) when the parser will not take `op_type` in `wanted`; None when it will."""
    from trtpipe.trt.parser import measured

    real = measured.applies_to(table.tensorrt_version)
    if wanted not in entry["types"]:
        if real and measured.built(op_type, wanted):
            return None
        return ("documented", f"TensorRT {table.tensorrt_version}'s ONNX parser lists {op_type} for "
                              f"{', '.join(entry['types'])}, not {wanted}")
    refusal = measured.type_refusal(op_type, wanted) if real else None
    if refusal:
        return ("measured", f"TensorRT {table.tensorrt_version}'s list gives {op_type} {wanted}, but the real "
                            f"{measured.label()} parser refused a single-op {wanted} {op_type} whose FP32 twin built "
                            f"({refusal[:200]})")
    return None


def measured_overrides(plan: Mapping, table: ParserOps) -> list[dict]:
    """(op type, planned precision) pairs the documented list omits but the real parser built
    (measured.py): not findings, recorded so the report shows why the documentation was overruled."""
    from trtpipe.trt.parser import measured

    if not measured.applies_to(table.tensorrt_version):
        return []
    seen = {}
    for node in plan.get("nodes", []):
        wanted = PLAN_TYPES.get(node.get("precision"))
        entry = table.ops.get(node.get("op_type", ""))
        if (wanted and entry and entry.get("supported") and entry.get("types") and wanted not in entry["types"]
                and node["op_type"] not in OUTPUT_NOT_LISTED and measured.built(node["op_type"], wanted)):
            seen.setdefault((node["op_type"], node["precision"]), {
                "op_type": node["op_type"], "planned": node["precision"], "parser_types": list(entry["types"]),
                "measured": f"built by {measured.label()} (single-op {wanted} model, python -m bench.rtx --ops)"})
    return sorted(seen.values(), key=lambda f: (f["op_type"], f["planned"]))


def plan_precision_findings(plan: Mapping, table: ParserOps) -> list[dict]:
    """One finding per (op type, planned precision) the parser will not take, with its nodes."""
    findings: dict[tuple[str, str], dict] = {}
    for node in plan.get("nodes", []):
        wanted = PLAN_TYPES.get(node.get("precision"))
        entry = table.ops.get(node.get("op_type", ""))
        if wanted is None or not entry or not entry.get("supported") or not entry.get("types"):
            continue
        if node["op_type"] in OUTPUT_NOT_LISTED:
            continue
        verdict = _verdict(node["op_type"], wanted, entry, table)
        if verdict is None:
            continue
        key = (node["op_type"], node["precision"])
        finding = findings.setdefault(key, {
            "op_type": node["op_type"], "planned": node["precision"], "parser_types": list(entry["types"]),
            "evidence": verdict[0], "reason": verdict[1], "count": 0, "nodes": []})
        finding["count"] += 1
        if len(finding["nodes"]) < NODES_LISTED:
            finding["nodes"].append(node["name"])
    return sorted(findings.values(), key=lambda f: (f["op_type"], f["planned"]))


def pin_rule(op_type: str) -> str:
    """A precision rule keeping every node of this op type in FP32, as one shell word that works pasted:
    quoted (a brace expansion in bash split the unquoted form in three), and `++` (adds the rule or
    replaces one of that name; `+` fails when it exists: config/append_hint.py)."""
    from trtpipe.config.override_text import shell_quoted

    name = "".join(c if c.isalnum() else "_" for c in op_type.lower())
    return shell_quoted(f"++precision.rules.keep_{name}={{match:op_type,pattern:{op_type},precision:fp32}}")


def one_line(findings: list[dict]) -> str:
    return "; ".join(f"{f['op_type']} planned {f['planned']} ({f['count']} node(s), e.g. {f['nodes'][0]}): "
                     f"{f['reason']}; to keep it in FP32: {pin_rule(f['op_type'])}" for f in findings)
