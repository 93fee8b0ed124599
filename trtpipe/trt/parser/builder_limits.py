"""What TensorRT's *builder* refuses after its ONNX parser took the model: measured limits,
checked on the graph before the build, reported by the build stage's op check beside the
parser's list (build/parser_support.json, a finding with `"stage": "builder"`).

The one limit known (measured on TensorRT-RTX 1.7.1 with `python -m bench.rtx`, issue 23):
an LSTM or GRU inside an If branch whose first output `Y` no node reads (the graph uses only
`Y_h`/`Y_c`, as PyTorch's `nn.LSTMCell`/`nn.GRUCell` exports do) parses, then the builder
stops with an internal error of its graph-scope analysis: `[graphScope.cpp::analyze::471]
Error Code 2: Internal Error (Assertion tScope.getType() != ScopeType::kUNDEFINED failed.)`
when `Y` is named and unread, `[graphScope.cpp::analyze::463] ... Assertion
mScopedOp2Scopes.contains(childScopedOp) failed` when `Y` is omitted (`""`). The parser builds
the node as an ILoop inside the IIfConditional; the loop output for `Y` is left in no scope.
The same node builds when `Y` is read, and at the top level (outside any If) with `Y` unread.
Measured on single-node models (tests/trt/test_builder_limits.py builds them): LSTM and GRU
in an If with `Y` unread refused, with `Y` read built; the real case is Silero VAD's decoder
(bench/wild, `silero_vad`). RNN was not measured, so it is not claimed.

Decisions:
- Severity: an *error* (exit 2 unless `build.unsupported=warn`) only for the product it was
  measured on, `build.backend=tensorrt_rtx`; a *warning* for TensorRT 10/11. The parser's op
  verdicts carry over to TensorRT 11 (trtpipe/trt/parser/measured.py: the same onnx-tensorrt
  importer), but this is the builder's internal graph-scope analysis, a different code base
  in TensorRT-RTX; refusing a model TensorRT 11 may build would be worse than a warning that
  names the risk and the measurement.
- `attribute()` gives the bench oracle the op of a builder refusal: the builder's line names
  no node, so the refusal is attributed to this limit only when that line carries the
  limit's signature and the model holds a node under the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import onnx


@dataclass(frozen=True)
class BuilderLimit:
    key: str
    op_types: tuple[str, ...]
    signature: str      # a fragment of the builder's error line
    reason: str


RECURRENT_Y_UNREAD_IN_IF = BuilderLimit(
    key="recurrent_y_unread_in_if",
    op_types=("LSTM", "GRU"),
    signature="[graphScope.cpp::analyze::",
    reason=("inside an If branch with its output Y read by no node: the parser takes it, the builder stops "
            "(measured on TensorRT-RTX 1.7.1: an internal error, [graphScope.cpp::analyze::471] Assertion "
            "tScope.getType() != ScopeType::kUNDEFINED failed, or ::463 when Y is omitted); the same node "
            "builds when Y is read or when it is outside the If"),
)


def _offending(model: onnx.ModelProto) -> list[tuple[str, str]]:
    from trtpipe.graph.names.recurrent_in_if import recurrent_without_y_in_if

    return recurrent_without_y_in_if(model, RECURRENT_Y_UNREAD_IN_IF.op_types)


def findings(model: onnx.ModelProto, tensorrt_version: str, backend: str = "tensorrt") -> list[dict]:
    """One finding per op type under the limit, shaped like the op list's findings."""
    from trtpipe.graph.names.parser_support import NODES_LISTED

    limit = RECURRENT_Y_UNREAD_IN_IF
    severity = "error" if backend == "tensorrt_rtx" else "warning"
    scope = "" if severity == "error" else f"; TensorRT {tensorrt_version}'s builder was not measured"
    by_op: dict[str, list[str]] = {}
    for where, op_type in _offending(model):
        by_op.setdefault(op_type, []).append(where)
    return [{"op": op, "domain": "", "op_type": op, "severity": severity, "stage": "builder", "limit": limit.key,
             "reason": limit.reason + scope, "count": len(nodes), "nodes": nodes[:NODES_LISTED]}
            for op, nodes in sorted(by_op.items())]


def add_to(report: dict, model: onnx.ModelProto, backend: str = "tensorrt") -> None:
    """Merge the builder findings into the op check's report (errors first, as the parser's)."""
    from trtpipe.graph.names.parser_support import SEVERITIES

    extra = findings(model, report["tensorrt_version"], backend)
    if not extra:
        return
    taken = {f["op"] for f in report["findings"] if f["severity"] in ("error", "warning")}
    extra = [f for f in extra if f["op"] not in taken]  # an op the parser already refuses says enough
    report["findings"] = sorted(report["findings"] + extra,
                                key=lambda f: (SEVERITIES.index(f["severity"]), f["op"]))
    for f in extra:
        report["errors" if f["severity"] == "error" else "warnings"].append(f["op"])


def is_builder(finding: Mapping) -> bool:
    return finding.get("stage") == "builder"


def attribute(builder_line: str, model: onnx.ModelProto) -> str:
    """The op type a builder refusal is attributed to ('' when its line is not the limit's)."""
    if RECURRENT_Y_UNREAD_IN_IF.signature not in builder_line:
        return ""
    offending = _offending(model)
    return offending[0][1] if offending else ""
