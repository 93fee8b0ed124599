"""A window of the candidate's main-graph nodes as a model of its own.

A window is the set of nodes that compute one tensor (`output`) from a cut: tensors produced
before the window, fed to the model as inputs. Every node of the window is an ancestor of
`output` (nothing that does not reach it is kept).

Decisions:
- A node reads its inputs and, through an If/Loop/Scan body, every outer-scope tensor the body
  names: both are what it needs (`node_reads`).
- Initializers a window reads stay initializers (weights are part of the failure: an FP16 weight is
  the plan's decision); every other tensor read from outside the window is a graph input.
- The model keeps the candidate's opsets, IR version and local functions, so each node is the
  candidate's node, unchanged (same name, attributes and types).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper

PRECISION_TYPES = {"fp16": onnx.TensorProto.FLOAT16, "fp32": onnx.TensorProto.FLOAT, "bf16": onnx.TensorProto.BFLOAT16,
                   "fp64": onnx.TensorProto.DOUBLE}


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Inputs, then outer-scope names its bodies read (names no body node or body input defines)."""
    reads = [name for name in node.input if name]
    for attribute in node.attribute:
        for body in ([attribute.g] if attribute.HasField("g") else list(attribute.graphs)):
            defined = {v.name for v in body.input} | {t.name for t in body.initializer}
            for inner in body.node:
                reads += [name for name in node_reads(inner) if name not in defined and name not in reads]
                defined.update(inner.output)
    return reads


def window_nodes(nodes: list[onnx.NodeProto], producer: Mapping[str, int], output: str,
                 allowed: set[int]) -> tuple[list[int], list[str]]:
    """(node positions that compute `output` within `allowed`, in graph order; the tensors read from
    outside them, initializers excluded by the caller), walking back from `output`."""
    taken: set[int] = set()
    cut: list[str] = []
    stack = [output]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        position = producer.get(name)
        if position is None or position not in allowed:
            cut.append(name)
            continue
        if position not in taken:
            taken.add(position)
            stack.extend(node_reads(nodes[position]))
    return sorted(taken), cut


def window_model(candidate: onnx.ModelProto, positions: Iterable[int], inputs: Mapping[str, np.ndarray],
                 output: str, output_precision: str, output_shape: list[int], name: str = "reduced") -> onnx.ModelProto:
    """The window as a model: `inputs` (name -> typed array) its graph inputs, `output` its one output
    (of the shape the reference computed for it: the window is for these inputs)."""
    nodes = [candidate.graph.node[p] for p in positions]
    initializers = {t.name: t for t in candidate.graph.initializer}
    read = {name for node in nodes for name in node_reads(node)}
    graph = helper.make_graph(
        [_copy(node) for node in nodes], name,
        [helper.make_tensor_value_info(key, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))
         for key, value in inputs.items()],
        [helper.make_tensor_value_info(output, PRECISION_TYPES.get(output_precision, onnx.TensorProto.FLOAT),
                                       list(output_shape))],
        initializer=[_copy(initializers[key]) for key in sorted(read) if key in initializers])
    model = helper.make_model(graph, ir_version=candidate.ir_version, opset_imports=list(candidate.opset_import),
                              producer_name="trtpipe-reduce")
    model.functions.extend(candidate.functions)
    return model


def _copy(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


