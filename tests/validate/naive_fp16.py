"""Test helper: the naive FP16 conversion users try first, and the same with chosen nodes kept FP32.

`naive_fp16` converts every float tensor to FP16: initializers, `Constant`s,
`Cast(to=FLOAT)` and every op's output; Casts at the graph inputs and outputs
keep the model's interface FP32. Nothing is kept FP32 for accuracy, only where
an op's schema does not accept FP16 at all (Resize's `scales` must be
`tensor(float)`). It is written here, without onnxconverter-common, so the
tests do not depend on another tool's choices. What it does to the built-in
models is the point: the -3.4e38 attention mask constant becomes -inf (and
`0 * -inf` is NaN), and the LayerNorm variances overflow.

`fp16_except(model, keep_fp32)` is the positive control: nodes for which
`keep_fp32(node)` is true compute in FP32, with a Cast wherever a tensor
crosses between the two precisions (one Cast per tensor and target type).
It is a test helper, not the precision stage: no attempt at fewest Casts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FP16, FP32 = TensorProto.FLOAT16, TensorProto.FLOAT


def naive_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every float tensor in FP16 and FP32 graph inputs/outputs."""
    return fp16_except(model, lambda node: False)


def fp16_except(model: onnx.ModelProto, keep_fp32: Callable[[onnx.NodeProto], bool]) -> onnx.ModelProto:
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    graph = converted.graph
    del graph.value_info[:]
    float_tensors = _float_tensors(model)
    opset = next(e.version for e in model.opset_import if e.domain in ("", "ai.onnx"))
    # Precision each node wants for each float input: FP32 if the node is kept
    # or the schema refuses FP16 at that input, else FP16.
    wanted = {}
    for index, node in enumerate(graph.node):
        fp16_ok = _inputs_accepting_fp16(node, opset)
        for slot, name in enumerate(node.input):
            if name in float_tensors:
                wanted.setdefault(name, set()).add(FP16 if fp16_ok[slot] and not keep_fp32(node) else FP32)
    precision = {value.name: FP32 for value in graph.input}
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == FP32 and wanted.get(tensor.name) == {FP16}:
            graph.initializer[index].CopyFrom(_to_fp16(tensor))
        precision[tensor.name] = graph.initializer[index].data_type
    nodes, casts = [], {}
    for node in graph.node:
        node_type = FP32 if keep_fp32(node) else FP16
        if node.op_type == "Constant":
            node_type = FP16 if wanted.get(node.output[0]) == {FP16} else FP32
        _retype_node(node, node_type)
        fp16_ok = _inputs_accepting_fp16(node, opset)
        for slot, name in enumerate(node.input):
            if name in precision and name in float_tensors:
                target = FP16 if fp16_ok[slot] and node_type == FP16 else FP32
                if precision[name] != target:
                    node.input[slot] = _cast(name, target, casts, nodes)
        nodes.append(node)
        for name in node.output:
            if name in float_tensors:
                precision[name] = node_type
    exits = _cast_outputs(graph, nodes, precision)
    del graph.node[:]
    graph.node.extend(nodes + exits)
    onnx.checker.check_model(converted, full_check=True)
    return converted


def _float_tensors(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info] if v.type.tensor_type.elem_type == FP32}
    return names | {t.name for t in graph.initializer if t.data_type == FP32}


def _inputs_accepting_fp16(node: onnx.NodeProto, opset: int) -> list[bool]:
    schema = onnx.defs.get_schema(node.op_type, opset, "")
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    return [
        "tensor(float16)" in allowed.get(schema.inputs[min(i, len(schema.inputs) - 1)].type_str, set())
        for i in range(len(node.input))
    ]


def _retype_node(node: onnx.NodeProto, node_type: int) -> None:
    for attribute in node.attribute:
        if node.op_type == "Constant" and attribute.name == "value" and attribute.t.data_type == FP32:
            if node_type == FP16:
                attribute.t.CopyFrom(_to_fp16(attribute.t))
        if node.op_type == "Cast" and attribute.name == "to" and attribute.i == FP32:
            attribute.i = node_type


def _to_fp16(tensor: onnx.TensorProto) -> onnx.TensorProto:
    with np.errstate(over="ignore"):  # -3.4e38 -> -inf is the point
        values = numpy_helper.to_array(tensor).astype(np.float16)
    return numpy_helper.from_array(values, tensor.name)


def _cast(name: str, target: int, casts: dict, nodes: list) -> str:
    key = (name, target)
    if key not in casts:
        suffix = "fp16" if target == FP16 else "fp32"
        casts[key] = f"{name}__{suffix}"
        nodes.append(helper.make_node("Cast", [name], [casts[key]], name=f"{name}/to_{suffix}", to=target))
    return casts[key]


def _cast_outputs(graph: onnx.GraphProto, nodes: list, precision: dict) -> list[onnx.NodeProto]:
    """Keep FP32 graph outputs: an FP16 producer writes `<name>__fp16`, a Cast writes `<name>`."""
    exits = []
    for value in graph.output:
        if value.type.tensor_type.elem_type != FP32 or precision.get(value.name) != FP16:
            continue
        internal = value.name + "__fp16"
        for node in nodes:
            node.input[:] = [internal if name == value.name else name for name in node.input]
            node.output[:] = [internal if name == value.name else name for name in node.output]
        exits.append(helper.make_node("Cast", [internal], [value.name], name=f"{value.name}/to_fp32", to=FP32))
    return exits
