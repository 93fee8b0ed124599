"""The parser's logged element types against precision_plan.json, node by node.

A node of the plan is "as planned" when the parser logged it and every one of its inputs
and outputs has the type the plan implies:

- plan `fp16`: every float tensor the precision governs is HALF; plan `fp32`: FLOAT.
  "Governed" is read off the ONNX operator schema: a tensor of the same type constraint
  as the node's first output, when that constraint admits both float16 and float (Add's
  T, MatMul's T, Gather's data). A tensor with a type of its own (Resize's `roi` is T2
  beside X's T1, `scales` is float, Pow's exponent is T1, LayerNormalization's `Mean`
  output is U) is not the plan's to choose: it must have the type trtpipe wrote.
- any other plan entry (`keep`: authored precision kept; `none`: no float output):
  every tensor has the type written in the model (ONNX type inference of
  precision/model.onnx).

Nodes trtpipe inserted (Casts), which the plan does not list, are checked against the
written types as well and counted apart.

Every graph of the model is read, If/Loop/Scan bodies included (issue 32, item 15): the parser
logs a body's nodes under their own names, like the main graph's (`if/then_branch/act [Relu]
inputs: ...`), and a body reads outer-scope tensors by name, so the written types of every
graph form one table (ONNX forbids a body to reuse an outer name).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import defs

from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.trt.rtx.parser_log import ParserLog

FLOATS = {"FLOAT", "HALF", "BF16", "DOUBLE", "FP8", "FP4"}
PLANNED = {"fp16": "HALF", "fp32": "FLOAT", "bf16": "BF16"}
# ONNX element type names as the TensorRT parser prints them, where they differ.
_PARSER_NAME = {"FLOAT16": "HALF", "BFLOAT16": "BF16", "FLOAT8E4M3FN": "FP8"}


@dataclass
class Comparison:
    planned: int = 0                 # plan nodes with an ONNX node in the model
    as_planned: int = 0
    in_bodies: int = 0               # of `planned`, nodes inside If/Loop/Scan bodies
    not_in_model: int = 0            # plan nodes the model does not hold (a disagreement each)
    removed: int = 0                 # authored Casts the plan records as removed (redundant_casts)
    no_node_lines: bool = False      # the log holds no per-node line: nothing could be compared
    inserted: int = 0                # nodes in the model but not in the plan (Casts)
    inserted_as_written: int = 0
    constants: int = 0               # plan's Constant nodes: initializers for the parser
    disagreements: list[str] = field(default_factory=list)


def _type_name(elem_type: int) -> str:
    name = onnx.TensorProto.DataType.Name(elem_type)
    return _PARSER_NAME.get(name, name)


@dataclass(frozen=True)
class TypeProblem:
    """One logged tensor whose type is not the expected one."""
    side: str          # "input" | "output"
    tensor: str
    parsed: str        # the parser's type name (FLOAT, HALF...)
    expected: str
    governed: bool     # the plan's precision chose this tensor's type (see the module doc)

    def __str__(self) -> str:
        return f"{self.side} {self.tensor} parsed {self.parsed}, expected {self.expected}"


def written_types(model: onnx.ModelProto) -> dict[str, str]:
    """Element type of every tensor of every graph (bodies included), as written (plus inferred)."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - the declared types are still there
        pass
    types: dict[str, str] = {}
    for g in all_graphs(model.graph):
        types.update({t.name: _type_name(t.data_type) for t in g.initializer})
        for v in [*g.input, *g.output, *g.value_info]:
            if v.type.HasField("tensor_type"):
                types[v.name] = _type_name(v.type.tensor_type.elem_type)
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        types[n.output[0]] = _type_name(a.t.data_type)
    return types


def removed_casts(plan: dict) -> set[str]:
    """The authored Casts the precision stage removed as redundant, by the plan's own record
    (`redundant_casts`, trtpipe/precision/materialize/redundant_casts.py): listed in `nodes`,
    absent from the model by design."""
    record = plan.get("redundant_casts") or {}
    return {cast["name"] for cast in record.get("casts", []) if cast.get("authored")}


def model_nodes(model: onnx.ModelProto) -> dict[str, tuple[onnx.NodeProto, str]]:
    """Every node of every graph by name, with where it sits: "" for the main graph, else the
    body's path (`if.then_branch`, `loop.body/if.else_branch` for nested bodies)."""
    found: dict[str, tuple[onnx.NodeProto, str]] = {}

    def walk(graph: onnx.GraphProto, where: str) -> None:
        for node in graph.node:
            found.setdefault(node.name, (node, where))
            for attribute in node.attribute:
                bodies = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                for body in bodies:
                    walk(body, f"{where}/{node.name}.{attribute.name}" if where else f"{node.name}.{attribute.name}")

    walk(model.graph, "")
    return found


def _governed(node: onnx.NodeProto, opset: dict[str, int], side: str, index: int) -> bool:
    """Whether the plan's precision chooses this input's/output's float type (see module doc)."""
    try:
        schema = defs.get_schema(node.op_type, opset.get(node.domain, 1), node.domain)
    except Exception:  # noqa: BLE001 - an op ONNX does not define: the plan governs it
        return True
    params = schema.inputs if side == "inputs" else schema.outputs
    if not params or not schema.outputs:
        return True
    param = params[min(index, len(params) - 1)]
    if param.type_str != schema.outputs[0].type_str:
        return False  # a type of its own (Resize's roi T2 beside X's T1, Pow's exponent T1)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    kinds = allowed.get(param.type_str, {param.type_str})
    return "tensor(float16)" in kinds and "tensor(float)" in kinds


def opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Domain -> opset version ("" and "ai.onnx" both name the default domain)."""
    opset = {o.domain: o.version for o in model.opset_import}
    opset.setdefault("ai.onnx", opset.get("", 1))
    return opset


def compare(plan_path: Path, model_path: Path, log: ParserLog) -> Comparison:
    plan = json.loads(plan_path.read_text())
    model = onnx.load(str(model_path), load_external_data=False)  # types only: the weights are not read
    opset = opsets(model)
    types = written_types(model)
    nodes = model_nodes(model)
    result = Comparison(no_node_lines=not log.nodes)
    plan_names, gone = set(), removed_casts(plan)
    for entry in plan["nodes"]:
        name, precision = entry["name"], entry["precision"]
        plan_names.add(name)
        if name not in nodes and name in gone:
            result.removed += 1
            continue
        if name not in nodes:
            # The plan describes precision/model.onnx, bodies included: a node it lists that the
            # model does not hold is a disagreement, not a node to skip.
            result.not_in_model += 1
            result.disagreements.append(f"{name} [{entry.get('op_type', '?')}] plan {precision}: "
                                        "not in precision/model.onnx")
            continue
        node, where = nodes[name]
        if node.op_type == "Constant":
            # ORT hands Constant nodes to the EP as initializers ("Importing initializer"):
            # the parser logs no node; its type is checked where a node reads it.
            result.constants += 1
            continue
        result.planned += 1
        result.in_bodies += bool(where)
        problems = node_problems(node, log, types, opset, PLANNED.get(precision))
        if problems:
            result.disagreements.append(f"{name} [{node.op_type}] plan {precision}: {'; '.join(problems)}")
        else:
            result.as_planned += 1
    for name, (node, _) in nodes.items():
        if name in plan_names or node.op_type == "Constant":
            continue
        result.inserted += 1
        problems = node_problems(node, log, types, opset, None)
        if problems:
            result.disagreements.append(f"{node.name} [{node.op_type}] inserted: {'; '.join(problems)}")
        else:
            result.inserted_as_written += 1
    return result


def node_problems(node: onnx.NodeProto, log: ParserLog, types: dict[str, str], opset: dict[str, int],
                  planned: str | None) -> list[str]:
    """Each logged input/output whose type is not the plan's (`planned`: HALF, FLOAT...) where the
    plan governs it, or not the written type elsewhere; ["not in the parser's log"] for a node the
    parser did not log."""
    if node.name not in log.nodes:
        return ["not in the parser's log"]
    return [str(p) for p in type_problems(node, log, types, opset, planned)]


def type_problems(node: onnx.NodeProto, log: ParserLog, types: dict[str, str], opset: dict[str, int],
                  planned: str | None) -> list[TypeProblem]:
    """node_problems, structured; [] for a node the parser did not log (the caller checks that)."""
    logged = log.nodes.get(node.name)
    if logged is None:
        return []
    problems = []
    for side, names, seen in (("inputs", list(node.input), logged.inputs),
                              ("outputs", list(node.output), logged.outputs)):
        for tensor, parser_type in seen:
            index = names.index(tensor) if tensor in names else 0
            governed = planned is not None and parser_type in FLOATS and _governed(node, opset, side, index)
            want = planned if governed else types.get(tensor)
            if want is not None and parser_type != want:
                problems.append(TypeProblem(side[:-1], tensor, parser_type, want, governed))
    return problems
