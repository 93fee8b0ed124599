"""QuantizeLinear/DequantizeLinear against the parser's type list: which type the list speaks of.

The parser's list (onnx_parser_ops/<version>.json, onnx-tensorrt docs/operators.md) gives one
type column per op, and for the Q/DQ pair it is the type of the *input*: `QuantizeLinear`
FP32, FP16, BF16 (the float it quantizes), `DequantizeLinear` INT8, FP8, FP4, INT4 (the codes
it dequantizes). The measured table agrees: its single-op DQ models were typed by their input
(INT8 and UINT8 built; FP32/FP16/BF16 were "not an ONNX type of DequantizeLinear" as inputs).

Decisions:
- A Q's planned precision is its input type, so the plan check (plan_types.py) reads it
  against the list as any op. A DQ's planned precision is its *output* type, which is its
  scale's type (opset >= 19: FP32, FP16 or BF16; before 19 always FP32), and the list says
  nothing against any of them: the plan check does not read a DQ's precision against the
  list (issue 31: the warning "DequantizeLinear planned fp16 ... not FP16" was false, and
  TensorRT-RTX 1.7.1 built all 42 FP16-output DQs of a ResNet-18).
- Instead each DQ's input type, read from the model, is checked against the list (for
  TensorRT 11 and later, corrected by the measured verdicts: UINT8 was built). A type outside
  it (ONNX Runtime's INT32 bias DQs, INT16, UINT16) is a warning with its nodes, not an error:
  the list is what the importer is documented for.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.trt.parser.parser_ops import ParserOps

DEQUANTIZE = "DequantizeLinear"
# The planned precision of these ops names their output type, which the list does not give.
OUTPUT_NOT_LISTED = frozenset({DEQUANTIZE})
NODES_LISTED = 20
_LIST_NAMES = {TensorProto.FLOAT8E4M3FN: "FP8", TensorProto.FLOAT8E4M3FNUZ: "FP8", TensorProto.FLOAT8E5M2: "FP8",
               TensorProto.FLOAT8E5M2FNUZ: "FP8", TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16",
               TensorProto.BFLOAT16: "BF16"}
if hasattr(TensorProto, "FLOAT4E2M1"):  # onnx >= 1.18
    _LIST_NAMES[TensorProto.FLOAT4E2M1] = "FP4"


def list_type_name(elem_type: int) -> str:
    """The parser list's spelling of an ONNX element type: FP8, FP4, INT8, UINT8, INT4, INT32, ..."""
    return _LIST_NAMES.get(elem_type) or TensorProto.DataType.Name(elem_type)


def dequantize_input_findings(model: onnx.ModelProto, table: ParserOps) -> list[dict]:
    """One finding per DQ input type outside the parser's list, with its nodes; [] when all are listed."""
    from trtpipe.numerics.tensor_types import infer_tensor_types
    from trtpipe.trt.parser import measured

    entry = table.ops.get(DEQUANTIZE) or {}
    listed = entry.get("types") or []
    nodes = [node for graph in all_graphs(model.graph) for node in graph.node
             if node.op_type == DEQUANTIZE and node.domain in DEFAULT_DOMAINS and node.input]
    if not nodes or not entry.get("supported") or not listed:
        return []
    types = infer_tensor_types(model)
    real = measured.applies_to(table.tensorrt_version)
    findings: dict[str, dict] = {}
    for node in nodes:
        elem_type = types.get(node.input[0])
        if not elem_type:
            continue
        name = list_type_name(elem_type)
        if name in listed or (real and measured.built(DEQUANTIZE, name)):
            continue
        finding = findings.setdefault(name, {
            "op_type": DEQUANTIZE, "input_type": name, "parser_types": list(listed), "count": 0, "nodes": [],
            "reason": f"TensorRT {table.tensorrt_version}'s ONNX parser lists DequantizeLinear inputs of "
                      f"{', '.join(listed)}, not {name}"})
        finding["count"] += 1
        if len(finding["nodes"]) < NODES_LISTED:
            finding["nodes"].append(node.name or node.output[0])
    return sorted(findings.values(), key=lambda f: f["input_type"])


def one_line(findings: list[dict]) -> str:
    return "; ".join(f"DequantizeLinear with {f['input_type']} input ({f['count']} node(s), e.g. {f['nodes'][0]}): "
                     f"{f['reason']}" for f in findings)
