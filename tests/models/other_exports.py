"""A built-in model as another exporter would name it: same graph, none of our scope names.

- `dynamo`: torch.onnx's dynamo exporter style, nodes `node_<OpType>_<index>` and
  intermediate tensors `val_<index>`;
- `unnamed`: no node names at all (TensorRT then names layers `node_of_<output>`),
  intermediate tensors `<index>` as older exporters wrote them.

Graph inputs, outputs and initializers keep their names: they are the model's
interface and parameters, which exporters keep.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from trtpipe.models import builtin_model

STYLES = ("dynamo", "unnamed")


def renamed(model: onnx.ModelProto, style: str) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    interface = {v.name for v in graph.input} | {v.name for v in graph.output} | {t.name for t in graph.initializer}
    tensors: dict[str, str] = {}
    for index, node in enumerate(graph.node):
        node.name = f"node_{node.op_type}_{index}" if style == "dynamo" else ""
        for position, tensor in enumerate(node.output):
            if tensor and tensor not in interface:
                tensors[tensor] = f"val_{index}_{position}" if style == "dynamo" else f"{index}_{position}"
    for node in graph.node:
        node.input[:] = [tensors.get(t, t) for t in node.input]
        node.output[:] = [tensors.get(t, t) for t in node.output]
    del graph.value_info[:]
    return model


def write_renamed_builtin(name: str, style: str, directory: Path) -> Path:
    path = directory / f"{name}_{style}.onnx"
    onnx.save(renamed(builtin_model(name), style), str(path))
    return path
