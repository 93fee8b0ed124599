"""What the TensorRT-RTX ONNX parser logged: per node, its inputs' and outputs' element types.

With `nv_detailed_build_log=1` the parser writes, for every ONNX node it imports, lines like

    mm [MatMul] inputs: [xh -> (8, 64)[HALF]], [w -> (64, 64)[HALF]],
    mm [MatMul] outputs: [y -> (8, 64)[HALF]],

(inside ORT's log prefix and terminal colour codes). The builder fuses the whole graph into
one Myelin `ForeignNode`, so the engine's layers say nothing per node: these lines are the
only per-node precision the real parser and builder report. Also read here: the engine
generation time and the lines that explain a refusal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# "<node> [<Op>] inputs: [..." ; the node name may hold spaces and brackets, the op does not.
_NODE_LINE = re.compile(r"\[\d{4}-\d\d-\d\d [\d:]+ +[A-Z]+\] (?P<node>.+?) \[(?P<op>[A-Za-z0-9_]+)\] "
                        r"(?P<side>inputs|outputs): (?P<rest>.*)$")
_TENSOR = re.compile(r"\[(?P<name>[^\[\]]*?) -> \((?P<dims>[^)]*)\)\[(?P<type>[A-Z0-9_]+)\]\]")
_ENGINE_SECONDS = re.compile(r"Engine generation completed in ([0-9.]+) seconds")
_WHILE = re.compile(r"While parsing node number \d+ (\[[^\]]*\])")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d ")
# Lines that explain a refusal: the parser's errors (its op checks, "In node ..."), the EP's
# "Unsupported data type ..."; not ORT's generic "fallback to CPU EP has been disabled".
_REFUSAL = re.compile(r"(  ERROR\]|Assertion failed|In node|Unsupported|unsupported|not supported)")
# Also not: the CUDA error TensorRT-RTX reports on its error path after a build fails
# ("catchCudaError ... cudaError 35"): the stand-in driver has no device (bench/rtx/standins),
# so that line says nothing about the model; the error before it does.
_GENERIC = re.compile(r"fallback to CPU EP has been explicitly disabled|GetCapability\(\) for .* failed with error"
                      r"|catchCudaError")


@dataclass
class NodeTypes:
    op: str
    inputs: list[tuple[str, str]] = field(default_factory=list)    # (tensor name, TYPE)
    outputs: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ParserLog:
    nodes: dict[str, NodeTypes]
    engine_seconds: float | None
    refusal_lines: list[str]
    parser_error: bool      # the ONNX parser itself logged an ERROR (ModelImporter, op checks)
    cpu_only: bool          # "Using legacy CPU-only mode": the build made no GPU call
    # The refusal lines after the last node line: what the builder said once the parser was done.
    # (The EP also parses each If/Loop body alone while it decides what it claims, with outer-scope
    # values of unknown shape as rank-0 inputs; such a parse may fail where the whole model parses,
    # so an earlier parser error does not mean the compiled network was refused by the parser.)
    builder_lines: list[str] = field(default_factory=list)


def clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip()


def _message(line: str) -> str:
    """The text after ORT's and TensorRT's prefixes."""
    for mark in ("  ERROR] ", "] "):
        if mark in line:
            line = line.rsplit(mark, 1)[-1] if mark == "  ERROR] " else line.split(mark, 2)[-1]
            break
    return line.strip()


def read(text: str) -> ParserLog:
    nodes: dict[str, NodeTypes] = {}
    engine_seconds = None
    refusals: list[str] = []
    cpu_only = False
    continuing = False
    after_last_node = 0
    for raw in text.splitlines():
        line = clean(raw)
        if continuing and not _STAMP.match(line):
            refusals[-1] += " " + line.strip()  # e.g. "In function checkConvInteger:" then "[8] false"
            continue
        continuing = False
        found = _NODE_LINE.search(line)
        if found:
            tensors = [(t["name"], t["type"]) for t in _TENSOR.finditer(found["rest"])]
            # The EP parses the model more than once (each If/Loop body alone while it decides what
            # it claims, then the whole model, twice): the last parse is the network the builder
            # got, so a node's "inputs" line starts its record afresh and its "outputs" line ends it.
            if found["side"] == "inputs":
                nodes[found["node"]] = NodeTypes(found["op"], tensors)
            else:
                nodes.setdefault(found["node"], NodeTypes(found["op"])).outputs = tensors
            after_last_node = len(refusals)
            continue
        seconds = _ENGINE_SECONDS.search(line)
        if seconds:
            engine_seconds = (engine_seconds or 0.0) + float(seconds.group(1))
        if "legacy CPU-only mode" in line:
            cpu_only = True
        if _REFUSAL.search(line) and not _GENERIC.search(line):
            refusals.append(_message(line))
            continuing = True
    parser_error = any("ModelImporter" in ln or "In function check" in ln for ln in refusals)
    return ParserLog(nodes, engine_seconds, refusals, parser_error, cpu_only, refusals[after_last_node:])


def reason(log: ParserLog, error: str, limit: int = 300) -> str:
    """One line saying why a model was refused: the parser's or the EP's own line when it
    logged one (the parser's op checks first), else the exception's text."""
    ranked = sorted(log.refusal_lines, key=lambda ln: 0 if ("In function" in ln or "check" in ln) else 1)
    text = ranked[0] if ranked else (error or "no reason logged")
    if "[ONNXRuntimeError]" in text:  # drop ORT's source location and C++ signature before it
        text = text[text.index("[ONNXRuntimeError]"):]
    where = next((m.group(1) for ln in log.refusal_lines if (m := _WHILE.search(ln))), None)
    if where and where not in text:
        text = f"{text} (node {where})"
    return " ".join(text.split())[:limit]


# The EP's error when the network was parsed and claimed but buildSerializedNetwork failed.
BUILDER_FAILED = "Failed to create serialized engine"


def builder_reason(log: ParserLog, error: str, limit: int = 300) -> str:
    """Why the builder refused: its first line after the parser was done, else the EP's error."""
    text = log.builder_lines[0] if log.builder_lines else (error or "no reason logged")
    return " ".join(text.split())[:limit]


_WHILE_OP = re.compile(r"While parsing node number \d+ \[(?P<op>[A-Za-z0-9_]+)")
_CHECK = re.compile(r"In function check(?P<op>[A-Z][A-Za-z0-9_]*)")


def refused_op(log: ParserLog) -> str:
    """The op type the parser named when it refused ("While parsing node number 3 [ConvInteger
    -> ...]", else "In function checkConvInteger"), or ''."""
    for pattern in (_WHILE_OP, _CHECK):
        for line in log.refusal_lines:
            found = pattern.search(line)
            if found:
                return found["op"]
    return ""
