"""For one node and its precision: the type each float input must have, and each output's type.

The rule (DESIGN.md, "Precision rules"): a node's precision is the type of its
float tensors. Which tensors those are comes from the op schema:

- A type variable bound to a float output *and* to at least one input (Add's
  `T`, Resize's `T1`) takes the node's precision, for the output and for every
  input bound to it.
- A type variable bound only to outputs (Cast's `T2`, ConstantOfShape's `T2`)
  gets its type from an attribute: the output keeps its type. This is why an
  author's Cast keeps its `to`.
- A type variable bound to one input and nothing else (Resize `roi`, Shape's
  and Cast's input, ArgMax's data, Pow's exponent) constrains nothing beyond
  its allowed types: the input is read in whatever type it is produced in, and
  cast (to its original type) only if that type is not allowed. Reading it
  as produced changes no value: a wider type holds the same numbers.
- A type variable bound to several inputs and no output (Equal's `T`) takes the
  node's precision, since those inputs must agree with each other.
- A fixed schema type (Resize `scales` is `tensor(float)`) is kept.
- Integer, bool, double and untyped tensors are never touched; a variable
  that binds any of them keeps its types.
- If the schema does not allow the precision for a variable at the model's
  opset (bf16 before opset 13 for most ops), the variable keeps its types and
  the reason is reported.

`keep` nodes, nodes with subgraphs (If/Loop/Scan: their types live in the
subgraph, whose nodes the plan names one by one), CastLike (an author's cast, like Cast), ops without a schema and ops
outside the default domain keep every type exactly as authored; a kept Cast may
also read a type its authored input type holds exactly (see `_kept_cast`). A Cast planned
`fp32` (only the FP32 baseline plans one, plan/baseline.py) reads whatever float type arrives,
and one that casts to FP16/BF16 casts to FP32 instead (see `_promoted_cast`; materialize.py
writes its new `to`).
Other domains (ai.onnx.ml, training; none of them in TensorRT's parser) tie
typed attributes to their inputs' type (TreeEnsemble's `nodes_splits`), which
these rules do not model: retyped, such a node fails the checker (corpus run).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import (
    KEEP,
    LOW_PRECISION,
    PRECISION_ELEMENT_TYPES,
    RETYPABLE,
    is_lossless,
    schema_type_name,
)
from trtpipe.precision.materialize.type_rules import OpTypeRules, op_type_rules
from trtpipe.onnxmodel.subgraphs import has_body

# Inputs the ONNX schema lets differ in type but TensorRT does not: its ONNX parser maps
# Pow to an IElementWiseLayer, whose two operands must have one type in a strongly typed
# network (the parser inserts no Cast). So the exponent follows the base's precision.
SAME_TYPE_AS_NODE = {("", "Pow"): frozenset({1}), ("ai.onnx", "Pow"): frozenset({1})}

# Ops whose types are the author's decision even when the plan names a precision.
AUTHOR_TYPED_OPS = frozenset({"CastLike"})


@dataclass(frozen=True)
class Requirement:
    """What one consumer accepts on one float input, and what a Cast must give it otherwise."""

    accepted: frozenset[int]
    cast_to: int
    # Why the input does not simply follow the node's precision; empty when it does.
    reason: str = ""

    @property
    def is_exact(self) -> bool:
        return len(self.accepted) == 1


def exactly(elem_type: int, reason: str = "") -> Requirement:
    return Requirement(frozenset({elem_type}), elem_type, reason)


@dataclass
class NodeTypes:
    """The decided types of one node; None marks a tensor that is not a managed float."""

    inputs: list[Requirement | None]
    outputs: list[int | None]
    # The node's precision as an element type; None when no float tensor of it follows one.
    target: int | None
    # Why (part of) the precision could not be applied, for the report.
    not_applied: list[str] = field(default_factory=list)


def decide_node_types(
    node: onnx.NodeProto, precision: str, types: dict[str, int], opsets: dict[str, int],
    decided: dict[tuple, NodeTypes] | None = None,
) -> NodeTypes:
    """The types `node` reads and produces under `precision` (see module docstring).

    Decision: with `decided` (a dict the caller owns for one pass over a graph), decided once
    per distinct key (a 4,000-node encoder has a few dozen). Every rule below reads the node
    only through its op type, domain, whether it has a body, and per input and output whether
    the name is empty and its type in `types`; with the precision and the domain's opset that
    is the key, so a hit is the same result. Each caller gets its own lists. The cache is the
    caller's, not the module's: no state outlives the pass.
    """
    if decided is None:
        return _decide_node_types(node, precision, types, opsets)
    key = (precision, node.domain, node.op_type, opsets.get(node.domain),
           has_body(node),
           tuple((bool(name), types.get(name)) for name in node.input),
           tuple((bool(name), types.get(name)) for name in node.output))
    found = decided.get(key)
    if found is None:
        found = decided[key] = _decide_node_types(node, precision, types, opsets)
    return NodeTypes(list(found.inputs), list(found.outputs), found.target, list(found.not_applied))



def _decide_node_types(
    node: onnx.NodeProto, precision: str, types: dict[str, int], opsets: dict[str, int]
) -> NodeTypes:
    if precision == KEEP and node.op_type == "Cast" and node.domain in DEFAULT_DOMAINS:
        return _kept_cast(node, types)
    if precision == "fp32" and node.op_type == "Cast" and node.domain in DEFAULT_DOMAINS:
        return _promoted_cast(node, types)
    if precision == KEEP and not any(types.get(name) in RETYPABLE for name in node.output if name):
        return _without_float_output(node, types, opsets)
    if precision == KEEP or node.op_type in AUTHOR_TYPED_OPS:
        return as_authored(node, types)
    if has_body(node):
        # Its bodies' nodes carry the precision (materialize.py); its own inputs and outputs keep
        # the authored types, which is the plan, not a precision that failed to apply.
        return as_authored(node, types)
    if node.domain not in DEFAULT_DOMAINS:
        return as_authored(node, types, f"{node.domain}::{node.op_type} is not a default-domain op; "
                                        "its types are kept as authored")
    opset = opsets.get(node.domain)
    rules = op_type_rules(node.domain, node.op_type, opset) if opset is not None else None
    if rules is None:
        return as_authored(node, types, f"no ONNX schema for {node.domain or 'ai.onnx'}::{node.op_type}")
    return _from_schema(node, PRECISION_ELEMENT_TYPES[precision], rules, types)


def as_authored(node: onnx.NodeProto, types: dict[str, int], reason: str = "") -> NodeTypes:
    """Every float input and output keeps the type it has in the input model."""
    inputs = [exactly(types[name]) if types.get(name) in RETYPABLE else None for name in node.input]
    outputs = [types.get(name) for name in node.output]
    return NodeTypes(inputs, outputs, None, [reason] if reason else [])


def _without_float_output(node: onnx.NodeProto, types: dict[str, int], opsets: dict[str, int]) -> NodeTypes:
    """A node with no float output (Shape, Size, a comparison...) keeps its types, except
    that an input whose type variable binds nothing else is read as it arrives.

    Decision: Shape(x) is the same whether x is FP16 or FP32; demanding the authored
    FP32 put a Cast in front of every Shape of an FP16 tensor (measured: 192 needless
    Casts in a 48-layer encoder, see bench/README.md).
    """
    kept = as_authored(node, types)
    opset = opsets.get(node.domain)
    rules = op_type_rules(node.domain, node.op_type, opset) if opset is not None else None
    if rules is None or has_body(node):
        return kept
    inputs_of, outputs_of = _bindings(node, rules)
    for variable, indices in inputs_of.items():
        lone = len(indices) == 1 and not outputs_of.get(variable)
        if lone and variable in rules.float_types_of_variable and kept.inputs[indices[0]] is not None:
            authored = types[node.input[indices[0]]]
            kept.inputs[indices[0]] = Requirement(
                rules.float_types_of_variable[variable], authored,
                f"{rules.describe()} input {indices[0]} is read in the type its producer gives it",
            )
    return kept


def _kept_cast(node: onnx.NodeProto, types: dict[str, int]) -> NodeTypes:
    """A kept Cast also reads any type its authored input type holds exactly.

    Its output is then the same values as authored: Cast(fp16 x, to=fp16)
    equals Cast(Cast(x, to=fp32), to=fp16). Demanding the authored fp32 would
    put an FP16 -> FP32 -> FP16 round trip in front of it.
    """
    kept = as_authored(node, types)
    authored = types.get(node.input[0]) if node.input else None
    if kept.inputs and kept.inputs[0] is not None:
        holds_exactly = frozenset(t for t in RETYPABLE if is_lossless(t, authored))
        kept.inputs[0] = Requirement(holds_exactly, authored)
    return kept


def _promoted_cast(node: onnx.NodeProto, types: dict[str, int]) -> NodeTypes:
    """A Cast planned fp32: it reads its input in whatever float type arrives, and writes FP32
    where the author wrote FP16/BF16 (other targets, integers and FP32, are kept).

    Decision: an author's Cast to or from FP16 is a precision boundary, not arithmetic. Kept as
    authored in a model that now computes in FP32, it would demand its authored FP16 input (a
    Cast FP32 -> FP16 in front of it) or write FP16 that its FP32 readers cast back: every value
    rounded through FP16 in a run that promises FP32.
    """
    promoted = as_authored(node, types)
    if promoted.inputs and promoted.inputs[0] is not None:
        promoted.inputs[0] = Requirement(RETYPABLE, types[node.input[0]])
    if promoted.outputs and promoted.outputs[0] in LOW_PRECISION:
        promoted.outputs[0] = PRECISION_ELEMENT_TYPES["fp32"]
        promoted.target = PRECISION_ELEMENT_TYPES["fp32"]
    return promoted


def _from_schema(
    node: onnx.NodeProto, target: int, rules: OpTypeRules, types: dict[str, int]
) -> NodeTypes:
    inputs_of, outputs_of = _bindings(node, rules)
    retyped, not_applied = set(), []
    for variable in rules.float_types_of_variable:
        ins, outs = inputs_of.get(variable, []), outputs_of.get(variable, [])
        if not ins or (not outs and len(ins) < 2):
            continue  # typed by an attribute, or a lone input read as produced
        bound = [node.input[i] for i in ins] + [node.output[i] for i in outs]
        if not all(types.get(name) in RETYPABLE for name in bound):
            continue  # integer/bool/double/untyped: never touched
        if target not in rules.float_types_of_variable[variable]:
            not_applied.append(
                f"{rules.describe()} does not allow {schema_type_name(target)} for {variable}"
            )
            continue
        retyped.add(variable)

    inputs = [
        _input_requirement(node, index, target, rules, types, retyped, inputs_of, outputs_of)
        for index in range(len(node.input))
    ]
    outputs = []
    for index, name in enumerate(node.output):
        parameter = rules.output_parameter(index)
        follows = name and parameter is not None and parameter.type_str in retyped
        outputs.append(target if follows else types.get(name))
    # A node none of whose float tensors follows the precision (Shape, Cast, ArgMax...) has
    # no precision of its own: its inputs are not reported as kept out of it.
    return NodeTypes(inputs, outputs, target if retyped else None, not_applied)


def _bindings(node: onnx.NodeProto, rules: OpTypeRules) -> tuple[dict, dict]:
    """Type variable -> indices of the node's (present) inputs and outputs bound to it."""
    inputs_of, outputs_of = defaultdict(list), defaultdict(list)
    for index, name in enumerate(node.input):
        parameter = rules.input_parameter(index)
        if name and parameter is not None and rules.is_type_variable(parameter.type_str):
            inputs_of[parameter.type_str].append(index)
    for index, name in enumerate(node.output):
        parameter = rules.output_parameter(index)
        if name and parameter is not None and rules.is_type_variable(parameter.type_str):
            outputs_of[parameter.type_str].append(index)
    return inputs_of, outputs_of


def _input_requirement(
    node, index, target, rules: OpTypeRules, types, retyped, inputs_of, outputs_of
) -> Requirement | None:
    name = node.input[index]
    authored = types.get(name) if name else None
    if authored not in RETYPABLE:
        return None
    parameter = rules.input_parameter(index)
    if parameter is None:  # more inputs than the schema declares: leave the model's own type
        return exactly(authored)
    where = f"{rules.describe()} input {index} ({parameter.name})"
    variable = parameter.type_str
    if variable in retyped:
        return exactly(target)
    if not rules.is_type_variable(variable):
        return exactly(authored, f"{where} is {variable} in the schema")
    if retyped and index in SAME_TYPE_AS_NODE.get((node.domain, node.op_type), ()):
        if target in rules.float_types_of_variable.get(variable, ()):
            return exactly(target, f"{where}: TensorRT needs it in the node's type (elementwise layer)")
    if not outputs_of.get(variable) and len(inputs_of[variable]) == 1:
        return Requirement(
            rules.float_types_of_variable[variable],
            authored,
            f"{where} is bound to type variable {variable}, which no output shares; "
            "it is read in the type its producer gives it",
        )
    return exactly(authored, f"{where}: type variable {variable} keeps its authored type")
