"""Single-op ONNX models, one per (op of trtpipe's parser operator list, element type), for
`python -m bench.rtx --ops` (bench/rtx/ops.py).

Where they come from: ONNX's own backend node tests (`onnx.backend.test.case.node`, shipped
in the onnx wheel): for each op the case named `test_<op in snake case>`, else the shortest
name among the cases whose graph is that one op. They are real, checked models with inputs
and attributes that make sense for the op (Conv's weights, Resize's scales, TopK's k),
which a generator written here from the schemas alone would not have.

What is changed, and why:
- Element type: every tensor of the case's data type (the type of the op's first output,
  else first input) whose schema type parameter admits the target type is retyped and its
  data cast (FP32 -> FP16, BF16, INT32, ...). A target the op's schema does not admit is
  not built ("not an ONNX type of this op"); the model must pass onnx.checker's full check.
- Inputs: the first of the case's data type stays a graph input (with a static profile of
  its shape, bench/rtx/ops.py); the others become initializers holding the test's
  values, as exported models carry shapes, weights, scales and axes (the parser needs many
  of them constant). ORT's graph optimisations are off in the compile (bench/rtx/
  compile_many.py) so nothing is folded before the EP sees the node.
- Opset: the default domain's import is lowered to the since-version of the op's schema the
  case uses (the same op definition), so an op unchanged since opset 13 is parsed as an
  opset-13 model, not as whatever opset the test was regenerated with.
Ops without a single-op backend case (sequence ops, random generators, ops ONNX removed)
get the hand-written builders in bench/rtx/op_extra.py, or are reported as not built.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper

TYPES = {"FP32": TensorProto.FLOAT, "FP16": TensorProto.FLOAT16, "BF16": TensorProto.BFLOAT16,
         "INT32": TensorProto.INT32, "INT64": TensorProto.INT64, "INT8": TensorProto.INT8,
         "UINT8": TensorProto.UINT8, "BOOL": TensorProto.BOOL}
FLOAT_TYPES = ("FP32", "FP16", "BF16")
INT_TYPES = ("INT32", "INT64", "INT8", "UINT8", "BOOL")
NAME_OF = {v: k for k, v in TYPES.items()}


class NotBuilt(Exception):
    """This (op, type) has no model: the message says why."""


def snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op).lower()


def _float_input(case) -> bool:
    graph = case.model.graph
    return bool(graph.input) and graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT


def _common_types(case) -> bool:
    """Every graph input and output of a type measured here (not DOUBLE, INT4, FLOAT8...)."""
    graph = case.model.graph
    return all(v.type.tensor_type.elem_type in NAME_OF for v in [*graph.input, *graph.output])


@functools.lru_cache(maxsize=1)
def backend_cases() -> dict[str, list]:
    """op type -> its single-node backend cases, the preferred one first."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases("")
    by_op: dict[str, list] = {}
    for case in cases:
        graph = case.model.graph
        if len(graph.node) == 1 and graph.node[0].domain in ("", "ai.onnx") and case.data_sets:
            by_op.setdefault(graph.node[0].op_type, []).append(case)
    for op, found in by_op.items():
        exact = f"test_{snake(op)}"
        # The plainest case first: fewest attributes (defaults: Resize without align_corners),
        # then the one named after the op, then the shortest name.
        found.sort(key=lambda c: (not _common_types(c), len(c.model.graph.node[0].attribute), not _float_input(c),
                                  c.name != exact,
                                  len(c.name), c.name))
    return by_op


@dataclass
class OpModel:
    op: str
    type_name: str
    model: onnx.ModelProto
    case: str           # the backend case it came from (or "hand-written")
    opset: int


def _formal(schema, side: str, index: int):
    params = schema.inputs if side == "input" else schema.outputs
    if not params:
        return None
    if index < len(params):
        return params[index]
    last = params[-1]
    return last if last.option == defs.OpSchema.FormalParameterOption.Variadic else None


def _admits(schema, type_str: str, elem: int) -> bool:
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    want = f"tensor({helper.tensor_dtype_to_string(elem).split('.')[-1].lower()})"
    return want in allowed.get(type_str, set())


def _np_type(elem: int):
    return helper.tensor_dtype_to_np_dtype(elem)


def _tensor(name: str, value: np.ndarray, elem: int) -> onnx.TensorProto:
    if elem == TensorProto.BFLOAT16:
        return helper.make_tensor(name, elem, value.shape, np.asarray(value, np.float32).flatten().tolist())
    return numpy_helper.from_array(np.asarray(value).astype(_np_type(elem)), name)


def _elem_name(elem: int) -> str:
    return {TensorProto.FLOAT: "float", TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16",
            TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.INT8: "int8",
            TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool"}.get(elem, str(elem))


def _source_type(schema, graph, node) -> tuple[int, bool]:
    """The case's data type: its first input bound to a type parameter that admits several
    of the types measured (Where's X, not its bool condition; Cast's input, not its `to`),
    else its first output's type."""
    params = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    declared = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    declared.update({i.name: i.data_type for i in graph.initializer})
    for index, name in enumerate(node.input):
        param = _formal(schema, "input", index)
        if name and name in declared and param is not None and param.type_str in params:
            admitted = sum(_admits(schema, param.type_str, t) for t in TYPES.values())
            if admitted >= 2:
                return declared[name], True
    return graph.output[0].type.tensor_type.elem_type, False


def from_case(case, op: str, type_name: str) -> OpModel:
    """The case's model retyped to `type_name`, inputs after the first as initializers."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph, node = model.graph, model.graph.node[0]
    default = next((o for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    schema = defs.get_schema(op, default.version if default else 1, "")
    source, from_input = _source_type(schema, graph, node)
    target = TYPES[type_name]
    inputs, _ = case.data_sets[0]
    values = dict(zip([i.name for i in graph.input], inputs))

    # A type parameter bound only to outputs (Cast's T2, EyeLike's T2) is set by an attribute:
    # it is not the op's input type and stays as the case wrote it.
    params = {c.type_param_str for c in schema.type_constraints}
    # (Unless no input carries the data type: ConstantOfShape's T2 is its data type.)
    input_params = {p.type_str for p in schema.inputs} if from_input else params

    def retyped(side: str, index: int, elem: int) -> int:
        param = _formal(schema, side, index)
        if elem != source or param is None:
            return elem
        if param.type_str in params & input_params and _admits(schema, param.type_str, target):
            return target
        return elem

    # The graph input kept: the first one of the case's data type (Range's start, Where's X),
    # else the first; a shape input (ConstantOfShape's) kept as a graph input would be a shape
    # tensor, whose values a real build takes from a profile the single-op model lacks.
    # A scalar is no data input but a size (Range's start, HannWindow's size): kept as a graph
    # input it too is a shape tensor; then every input is an initializer.
    keep = next((i for i, vi in enumerate(graph.input) if vi.type.tensor_type.elem_type == source
                 and len(vi.type.tensor_type.shape.dim) > 0), None)
    changed = False
    new_inputs = []
    for i, vi in enumerate(graph.input):
        index = list(node.input).index(vi.name) if vi.name in node.input else i
        elem = retyped("input", index, vi.type.tensor_type.elem_type)
        changed |= elem != vi.type.tensor_type.elem_type
        value = values.get(vi.name)
        if isinstance(value, np.generic):   # a scalar input (CumSum's axis) arrives as a numpy scalar
            value = np.asarray(value)
        if i == keep or value is None or not isinstance(value, np.ndarray):
            vi.type.tensor_type.elem_type = elem
            new_inputs.append(vi)
        else:
            graph.initializer.append(_tensor(vi.name, value, elem))
    del graph.input[:]
    graph.input.extend(new_inputs)
    for init in graph.initializer:
        if init.name in node.input and init.data_type == source:
            index = list(node.input).index(init.name)
            elem = retyped("input", index, init.data_type)
            if elem != init.data_type:
                init.CopyFrom(_tensor(init.name, numpy_helper.to_array(init), elem))
                changed = True
    for index, vo in enumerate(graph.output):
        elem = retyped("output", list(node.output).index(vo.name) if vo.name in node.output else index,
                       vo.type.tensor_type.elem_type)
        changed |= elem != vo.type.tensor_type.elem_type
        vo.type.tensor_type.elem_type = elem
        # The dims are left to inference (same rank, symbolic): with the other inputs now
        # constant, ONNX infers more than the case declared (STFT's onesided length).
        for i, dim in enumerate(vo.type.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"{vo.name}_d{i}"
    for attr in node.attribute:  # e.g. Cast's `to`, ConstantOfShape's value follow the case's type
        if attr.name == "value" and attr.t.data_type == source and target != source:
            attr.t.CopyFrom(_tensor(attr.t.name, numpy_helper.to_array(attr.t), target))
    if target != source and not changed:
        raise NotBuilt(f"{_elem_name(target)} is not an ONNX type of {op} "
                       f"(opset {default.version if default else '?'}) in this case")
    del graph.value_info[:]
    if default is not None:
        default.version = max(schema.since_version, 7)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker's reason is the verdict
        raise NotBuilt(f"{_elem_name(target)}: not a valid ONNX model of {op}: "
                       f"{str(exc).strip().splitlines()[0][:160]}") from None
    return OpModel(op, type_name, model, case.name, default.version if default else 0)


def types_to_try(op: str, documented: dict) -> list[str]:
    """FP32, FP16, BF16, the integer types the documented list gives the op, and the type of
    the op's backend case when that is an integer type (ConvInteger's UINT8)."""
    listed = set(documented.get("types", []))
    cases = backend_cases().get(op) or []
    if cases and cases[0].model.graph.input:
        own = NAME_OF.get(cases[0].model.graph.input[0].type.tensor_type.elem_type)
        if own in INT_TYPES:
            listed.add(own)
    return [*FLOAT_TYPES, *[t for t in INT_TYPES if t in listed]]


def build(op: str, type_name: str) -> OpModel:
    from bench.rtx import op_extra

    cases = backend_cases().get(op)
    if not cases:
        return op_extra.build(op, type_name)
    reasons = []
    for case in cases[:4]:   # the preferred case, then a few others (e.g. one whose type admits it)
        try:
            return from_case(case, op, type_name)
        except NotBuilt as exc:
            reasons.append(str(exc))
    raise NotBuilt(reasons[0])
