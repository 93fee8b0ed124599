"""Will TensorRT's ONNX parser take this model? The op set checked against the parser's list, on the CPU.

Every node is checked, nodes inside If/Loop/Scan bodies and model-local functions too,
and each op that TensorRT cannot parse is reported with the nodes that use it.

How the real parser decides (onnx-tensorrt ModelImporter.cpp `parseNode`; docs/faq.md
"Custom Layer Support"), and what this check does with it:
- It dispatches on the op type alone; the node's domain is not looked at. An op type with
  an importer (marked Y in docs/operators.md) is imported by it. A node of another domain
  (`com.microsoft.Gelu`) whose op type has an importer is imported as the ONNX op: a
  *warning* here, because its inputs, attributes or meaning may differ from the ONNX op's.
- Else, an op type naming a model-local function is imported by expanding the function:
  its body is checked instead of the node.
- Else the parser tries a plugin named after the op type (`FallbackPluginImporter`; the
  version from the node's `plugin_version` attribute, default "1"). TensorRT's own plugins
  (libnvinfer_plugin, which Polygraphy and trtexec load before parsing) are listed in the
  data: such a node is reported as *info*. Any other op is an *error* ("no importer, no
  plugin") unless `build.plugins` names plugin libraries: trtpipe cannot see which plugins
  a library registers without TensorRT, so it becomes a *warning* that a plugin with that
  name must be registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.graph.names.parser_names import parser_names
from trtpipe.trt.parser.parser_ops import ParserOps

SEVERITIES = ("error", "warning", "info")
NODES_LISTED = 20  # per op in the report; the count is always complete


@dataclass
class OpFinding:
    op: str  # qualified: "ConvInteger", "com.microsoft.FusedMatMul"
    domain: str  # "" for ONNX's default domain (also when the model writes "ai.onnx")
    op_type: str
    severity: str
    reason: str
    nodes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"op": self.op, "domain": self.domain, "op_type": self.op_type, "severity": self.severity,
                "reason": self.reason, "count": len(self.nodes), "nodes": self.nodes[:NODES_LISTED]}


def qualified(domain: str, op_type: str) -> str:
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def located_nodes(model: onnx.ModelProto, expands: Callable[[str], bool] = lambda op_type: True,
                  ) -> Iterator[tuple[str, onnx.NodeProto]]:
    """(where, node) for every node the parser would import: the main graph, every subgraph
    (named `<If node>/then_branch/<node>`, as graph/names/scopes.py names body nodes: a model the
    precision stage wrote already carries these names, kept as they are), and the bodies of
    model-local functions a node calls (`<node>/function:<name>/<node>`) when `expands(op_type)`."""
    functions = {f.name: f for f in model.functions}

    def walk(nodes, prefix: str, calling: tuple[str, ...]):
        for name, node in parser_names(nodes).items():
            where = name if name.startswith(prefix) else f"{prefix}{name}"
            yield where, node
            for attribute in node.attribute:
                graphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                for graph in graphs:
                    yield from walk(graph.node, f"{where}/{attribute.name}/", calling)
            function = functions.get(node.op_type)
            if function is not None and node.op_type not in calling and expands(node.op_type):
                yield from walk(function.node, f"{where}/function:{function.name}/", (*calling, node.op_type))

    yield from walk(model.graph.node, "", ())


def classify(domain: str, op_type: str, table: ParserOps, local_functions: set[str],
             plugin_libraries: bool) -> tuple[str, str] | None:
    """(severity, reason) for one op, or None when the parser imports it natively (or expands it)."""
    default = domain in DEFAULT_DOMAINS
    version = table.tensorrt_version
    if table.has_importer(op_type):
        if default:
            return None
        return ("warning", f"TensorRT's ONNX parser ignores the domain and imports it as the ONNX op {op_type} "
                           f"(TensorRT {version}): check that {domain}.{op_type} has the same inputs, attributes "
                           f"and meaning, or re-export it as the ONNX op")
    if op_type in local_functions:
        return None  # the body is checked node by node
    if op_type in table.plugins:
        return ("info", f"parsed into TensorRT's own plugin {op_type} (versions "
                        f"{', '.join(table.plugins[op_type])} in libnvinfer_plugin {version})")
    entry = table.ops.get(op_type)
    if not default:
        what = f"op of the {domain!r} domain (not ONNX): TensorRT {version} has no importer for it"
    elif entry is not None:
        note = f": {entry['restrictions']}" if entry.get("restrictions") else ""
        what = f"marked unsupported in TensorRT {version}'s parser list{note}"
    else:
        what = f"not in TensorRT {version}'s parser list (no importer)"
    if plugin_libraries:
        return ("warning", f"{what}; needs a plugin named {op_type!r} registered by the libraries in build.plugins")
    return ("error", f"{what}, and no plugin of that name")


def parser_support(model: onnx.ModelProto, table: ParserOps, plugin_libraries: bool = False) -> dict:
    """The report: per op, the severity, the reason and the nodes; every op type counted."""
    local_functions = {f.name for f in model.functions}
    findings: dict[str, OpFinding] = {}
    counts: dict[str, int] = {}
    present_restrictions: dict[str, str] = {}
    nodes = 0
    # The parser prefers its own importer to a local function of the same name.
    for where, node in located_nodes(model, expands=lambda op_type: not table.has_importer(op_type)):
        nodes += 1
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        op = qualified(domain, node.op_type)
        counts[op] = counts.get(op, 0) + 1
        if op in findings:
            findings[op].nodes.append(where)
            continue
        verdict = classify(domain, node.op_type, table, local_functions, plugin_libraries)
        if verdict is None:
            restriction = (table.ops.get(node.op_type) or {}).get("restrictions")
            if restriction and not domain:
                present_restrictions[node.op_type] = restriction
            continue
        findings[op] = OpFinding(op, domain, node.op_type, *verdict, nodes=[where])
    ordered = sorted(findings.values(), key=lambda f: (SEVERITIES.index(f.severity), f.op))
    return {
        "tensorrt_version": table.tensorrt_version,
        "selection": table.selection,
        "source": dict(table.source),
        "plugins_source": dict(table.plugins_source),
        "plugin_libraries": plugin_libraries,
        "nodes_checked": nodes,
        "opset": _opset_note(model, table),
        "findings": [f.as_dict() for f in ordered],
        "errors": [f.op for f in ordered if f.severity == "error"],
        "warnings": [f.op for f in ordered if f.severity == "warning"],
        "op_counts": dict(sorted(counts.items())),
        "restrictions": dict(sorted(present_restrictions.items())),
    }


def _opset_note(model: onnx.ModelProto, table: ParserOps) -> dict:
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    low, high = table.opset_range
    inside = opset is None or ((low is None or opset >= low) and opset <= high)
    return {"model": opset, "supported_range": [low, high], "inside": inside}


def one_line(report: Mapping, kinds: tuple[str, ...] = ("error",), first_nodes: int = 2) -> str:
    """"ConvInteger (3 nodes: a, b, ...), com.microsoft.FusedMatMul (1 node: c)"."""
    parts = []
    for f in report["findings"]:
        if f["severity"] in kinds:
            shown = ", ".join(f["nodes"][:first_nodes]) + (", ..." if f["count"] > first_nodes else "")
            parts.append(f"{f['op']} ({f['count']} node{'s' if f['count'] != 1 else ''}: {shown})")
    return "; ".join(parts)
