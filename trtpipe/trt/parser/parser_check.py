"""The build stage's op-support gate: run the parser check, write its report, stop or warn.

Decisions:
- Runs before the build stage touches TensorRT (or defers), so a CPU machine learns that
  the GPU build would fail at parse time, and why, before anyone copies the run over.
- The targeted version: the installed TensorRT's (package metadata, no import), else
  `build.tensorrt_version`, else the newest list shipped (trtpipe.trt.parser.parser_ops).
- `build.unsupported=error` (default): an op with severity "error" stops the run with
  exit 2, one line naming each op and its first nodes, and a fix that fits the ops found.
- Beside the parser's list, the builder's measured limits (trtpipe/trt/parser/builder_limits.py:
  a node the parser takes and the builder refuses) are findings of the same report, marked
  `"stage": "builder"`, and stop or warn the same way; the line says it is the builder.
  `warn`: a warning line; the report (build/parser_support.json) lists everything either way.
- Each DequantizeLinear's input type is checked against the parser's list (`dequantize_inputs`,
  trtpipe/trt/parser/qdq_types.py): the list's DQ types are input types, not the planned output.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping

from trtpipe.errors import UserError

log = logging.getLogger(__name__)

REPORT = "parser_support.json"
# Integer ops that ONNX Runtime's dynamic quantization (quantize_dynamic) and QOperator export produce.
QUANTIZED_INTEGER_OPS = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                         "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                         "QLinearGlobalAveragePool", "QLinearConcat", "QGemm"}


def check_parser_support(model, config: Mapping, installed_tensorrt: str | None, out_dir: Path,
                         plan: Mapping | None = None) -> tuple[dict, str]:
    """Write the report into out_dir; return it and the fact for the stage line. Raises UserError (exit 2).
    With the plan, also each planned FP16/BF16 op type against the parser's type list (trtpipe.trt.parser.plan_types)."""
    from trtpipe.config.build_schema import UNSUPPORTED, checked_choice
    from trtpipe.graph.names.parser_support import parser_support
    from trtpipe.trt.parser import builder_limits
    from trtpipe.trt.parser.parser_ops import list_for

    mode = checked_choice(config, "unsupported", UNSUPPORTED)
    configured = config.get("tensorrt_version")
    if installed_tensorrt:
        table = list_for(installed_tensorrt, "installed")
    elif configured is not None:
        table = list_for(str(configured), "build.tensorrt_version")
    else:
        table = list_for(None, "TensorRT not installed, build.tensorrt_version unset")
    report = parser_support(model, table, plugin_libraries=bool(config.get("plugins")))
    builder_limits.add_to(report, model, str(config.get("backend") or "tensorrt"))
    report["mode"] = mode
    from trtpipe.trt.parser import qdq_types

    report["dequantize_inputs"] = qdq_types.dequantize_input_findings(model, table)
    if report["dequantize_inputs"]:
        log.warning("build: DequantizeLinear input types vs TensorRT %s's parser: %s (see build/%s)",
                    table.tensorrt_version, qdq_types.one_line(report["dequantize_inputs"]), REPORT)
    if plan is not None:
        from trtpipe.trt.parser import plan_types

        report["plan_precision"] = plan_types.plan_precision_findings(plan, table)
        report["plan_precision_measured"] = plan_types.measured_overrides(plan, table)
        if report["plan_precision"]:
            log.warning("build: the plan's precision vs TensorRT %s's parser types: %s (see build/%s)",
                        table.tensorrt_version, plan_types.one_line(report["plan_precision"]), REPORT)
    (out_dir / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    parsed, built = _split(report)
    errors, warnings = _one_line(parsed, ("error",)), _one_line(report, ("warning",))
    builder_errors = _one_line(built, ("error",))
    version = table.tensorrt_version
    if errors and mode == "error":
        also = f"; and its builder fails on {builder_errors}" if builder_errors else ""
        raise UserError(f"TensorRT {version}'s ONNX parser cannot import {len(parsed['errors'])} op(s) of this "
                        f"model: {errors}{also}", _fix(report))
    if builder_errors and mode == "error":
        builder = "TensorRT-RTX's" if config.get("backend") == "tensorrt_rtx" else f"TensorRT {version}'s"
        raise UserError(f"{builder} builder cannot build {len(built['errors'])} op(s) of this model: "
                        f"{builder_errors}: {_builder_reason(built)}", _fix(report))
    if errors:
        log.warning("build: TensorRT %s's ONNX parser cannot import %s (build.unsupported=warn: continuing; "
                    "see build/%s)", version, errors, REPORT)
    if builder_errors:
        log.warning("build: TensorRT %s's builder cannot build %s (build.unsupported=warn: continuing; see build/%s)",
                    version, builder_errors, REPORT)
    if warnings:
        log.warning("build: parser check: %s (see build/%s)", _reasons(report), REPORT)
    if not report["opset"]["inside"]:
        log.warning("build: the model imports ONNX opset %s; TensorRT %s's parser supports opsets %s to %s",
                    report["opset"]["model"], version, *report["opset"]["supported_range"])
    return report, _fact(report, mode)


def _split(report: Mapping) -> tuple[dict, dict]:
    """The report's findings the parser refuses, and those the builder refuses (builder_limits)."""
    from trtpipe.trt.parser.builder_limits import is_builder

    parts = []
    for wanted in (False, True):
        findings = [f for f in report["findings"] if is_builder(f) == wanted]
        parts.append({"findings": findings, "errors": [f["op"] for f in findings if f["severity"] == "error"]})
    return parts[0], parts[1]


def _one_line(report: Mapping, kinds: tuple[str, ...]) -> str:
    from trtpipe.graph.names.parser_support import one_line

    return one_line(report, kinds)


def _builder_reason(built: Mapping) -> str:
    return next(f["reason"] for f in built["findings"] if f["severity"] == "error")


def _fact(report: Mapping, mode: str) -> str:
    version, findings = report["tensorrt_version"], report["findings"]
    if not report["errors"] and not report["warnings"]:
        return f"parser check: all {len(report['op_counts'])} op types importable (TensorRT {version} list)"
    shown = ", ".join(f"{f['op']} x{f['count']}" for f in findings if f["severity"] != "info")
    return (f"parser check (TensorRT {version} list): {len(report['errors'])} unsupported, "
            f"{len(report['warnings'])} warning(s){' [build.unsupported=warn]' if report['errors'] else ''}: {shown}")


def _reasons(report: Mapping) -> str:
    return "; ".join(f"{f['op']} ({f['count']} node(s), e.g. {f['nodes'][0]}): {f['reason']}"
                     for f in report["findings"] if f["severity"] == "warning")


def _fix(report: Mapping) -> str:
    ops = [f for f in report["findings"] if f["severity"] == "error" and f.get("stage") != "builder"]
    fixes = []
    if any(f.get("stage") == "builder" and f["severity"] == "error" for f in report["findings"]):
        fixes.append("re-export the model so that each LSTM/GRU inside an If reads its output Y (e.g. take the last "
                     "step of Y instead of Y_h), or so that it sits outside the If")
    if any(f["op_type"] in QUANTIZED_INTEGER_OPS for f in ops if not f["domain"]):
        fixes.append("export the float model instead of the integer-quantized one (TensorRT quantizes through "
                     "QuantizeLinear/DequantizeLinear pairs, e.g. from NVIDIA ModelOpt, not ConvInteger/MatMulInteger/"
                     "DynamicQuantizeLinear)")
    if any(f["domain"] for f in ops):
        fixes.append("re-export without ONNX Runtime's contrib ops (com.microsoft: skip onnxruntime's transformer "
                     "optimizer / fusions)")
    if ops and not fixes:
        fixes.append("re-export the model with ops TensorRT supports (see build/parser_support.json)")
    if ops:
        fixes.append("or load plugin libraries that register ops of these names: build.plugins=[/path/to/libplugins.so]")
    fixes.append("or add build.unsupported=warn to continue without a model TensorRT can parse")
    return "; ".join(fixes)
