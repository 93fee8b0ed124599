"""What each stage would do to the model by default, read without running a stage.

Decisions (each stage's preview is what is cheap to know and is said to be a preview):
- sanitize: the Constant nodes it lowers and the nodes whose inputs are all constant (folded, Q/DQ
  and random ops excepted, as graph/fold/fold_check.py's rules), followed through the graph: a
  lower bound, since shape folding (`Shape` of static dims, with shape inference) and If/Loop
  bodies are not evaluated here. Growth-limited folds (sanitize.fold_growth_limit) are counted.
- upgrade_opset: the default target (max(17, the model's opset): graph/upgrade.py's rule); the
  LayerNorm fusion is the real one (`fuse_layernorms`) run on the converted model in memory,
  with its fused and refused counts and the refusals' reasons; nothing is written.
- precision: the sample inputs it would draw without data.path: each integer input's range read
  from the model (numerics/input_ranges.py, the rule the run uses), the integer inputs it cannot
  read (a run stops before any stage asking for `data.inputs.<name>.low/high`), and the inputs
  with dynamic dimensions (the run needs data of a concrete shape, `data.inputs.<name>.shape`).
- the parser check: graph/names/parser_support.py against the shipped TensorRT parser list the
  build would use (`--tensorrt-version`, else the newest: trt/parser/parser_ops.py's rule), on the
  model as it is (the build checks the model the precision stage wrote, whose op set is the same
  but for the fused LayerNormalization nodes and Casts).
"""

from __future__ import annotations

import logging

import onnx

from trtpipe.graph.fold.fold_check import NEVER_FOLDED, RANDOM_OPS
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS

LAYERNORM_OPSET = 17  # graph/layernorm/layernorm_fusion.py's MIN_OPSET, graph/upgrade.py's DEFAULT_TARGET


def sanitize_preview(model: onnx.ModelProto) -> dict:
    constant = {tensor.name for tensor in model.graph.initializer}
    lowered = folded = 0
    for node in model.graph.node:  # exports are in topological order; a later pass would find more
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            lowered += 1
            constant.update(node.output)
        elif (node.domain in DEFAULT_DOMAINS and node.op_type not in NEVER_FOLDED | RANDOM_OPS
              and node.input and all(not name or name in constant for name in node.input)
              and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
            folded += 1
            constant.update(node.output)
    return {"constants_lowered": lowered, "nodes_foldable_at_least": folded,
            "note": "Shape computations of static dims and If/Loop bodies are folded too, not counted here"}


def upgrade_preview(model: onnx.ModelProto) -> dict:
    from trtpipe.errors import UserError
    from trtpipe.graph.layernorm.layernorm_fusion import fuse_layernorms
    from trtpipe.graph.passes.opset import convert_opset, default_opset

    opset = default_opset(model)
    target = max(LAYERNORM_OPSET, opset)
    preview: dict = {"opset": opset, "target": target, "converts": 0 < opset < target}
    try:
        converted = convert_opset(model, target)
    except UserError as error:  # the run would stop in upgrade_opset with this line
        preview["error"] = str(error)
        return preview
    if default_opset(converted) < LAYERNORM_OPSET:
        preview["layernorm"] = {"skipped": "the model imports no default-domain opset"}
        return preview
    quiet = logging.getLogger("trtpipe.graph.layernorm")
    level, quiet.level = quiet.level, logging.WARNING  # the fusion logs each match at INFO
    try:
        _fused_model, report = fuse_layernorms(converted)
    finally:
        quiet.setLevel(level)
    preview["layernorm"] = {"fused": len(report["fused"]),
                            "nodes_absorbed": sum(len(entry["absorbed"]) for entry in report["fused"]),
                            "refused": [{"anchor": r["anchor"], "reason": r["reason"]} for r in report["refused"]]}
    return preview


def precision_preview(model: onnx.ModelProto, inputs: list[dict]) -> dict:
    from trtpipe.numerics.input_ranges import INTEGER_TYPES, read_ranges

    weights = {tensor.name for tensor in model.graph.initializer}
    values = [value for value in model.graph.input if value.name not in weights]
    integer = [value.name for value in values if value.type.tensor_type.elem_type in INTEGER_TYPES]
    read = read_ranges(model, integer)
    return {
        "integer_ranges": {name: {"low": found.low, "high": found.high, "reason": found.reason}
                           for name, found in read.items()},
        "integer_ranges_needed": [name for name in integer if name not in read],
        "shapes_needed": [entry["name"] for entry in inputs if entry["dynamic"]],
        "floats_drawn_from": [0.0, 1.0],
    }


def parser_preview(model: onnx.ModelProto, tensorrt_version: str | None) -> dict:
    from trtpipe.graph.names.parser_support import parser_support
    from trtpipe.trt.parser.parser_ops import list_for

    table = list_for(tensorrt_version, "--tensorrt-version" if tensorrt_version else "trtpipe-inspect")
    report = parser_support(model, table)
    return {"tensorrt_version": report["tensorrt_version"], "selection": report["selection"],
            "opset": report["opset"], "findings": report["findings"], "errors": report["errors"],
            "warnings": report["warnings"]}
