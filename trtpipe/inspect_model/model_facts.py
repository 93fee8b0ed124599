"""What the model file says about itself: interface, opsets, ops, weights, subgraphs, authored precision.

Decisions:
- Read from the protos only, weights left on disk (`load_model(weights_on_disk=True)`): the
  size of a weight is its dims times its type's size (`tensor_nbytes`), never its bytes read.
- Ops are counted in every graph, If/Loop/Scan bodies included, as the parser imports them;
  `nodes` is the main graph's count (what `len(graph.node)` and the stages' lines say) and
  `nodes_with_subgraphs` the whole count.
- A dynamic dimension is shown by its name (`batch`) or `?` when the export left it unnamed.
- "Authored" low precision is what the file holds before any stage: FP16/BF16 weights, Casts
  to FP16/BF16, FP16/BF16 graph inputs or outputs. Q/DQ: the Quantize/DequantizeLinear
  counts and the types of their codes (a zero point's type; INT8 when a Q gives none).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
from onnx import TensorProto

from trtpipe.onnxmodel import input_dims
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, on_disk_span, tensor_nbytes

LOW_PRECISION = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def type_name(elem_type: int) -> str:
    """"float32", "int64", "float16"... as numpy spells them; ONNX's name for types numpy lacks."""
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type).name)
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()


def value_facts(value: onnx.ValueInfoProto) -> dict:
    tensor_type = value.type.tensor_type
    shape = input_dims.labels(value)
    return {"name": value.name, "type": type_name(tensor_type.elem_type) if value.type.HasField("tensor_type")
            else value.type.WhichOneof("value"), "shape": shape,
            "dynamic": [d for d in (shape or []) if isinstance(d, str)] if shape is not None else ["rank"]}


def model_facts(model: onnx.ModelProto, path: Path) -> dict:
    graphs = list(all_graphs(model.graph))
    ops: Counter = Counter()
    for graph in graphs:
        for node in graph.node:
            ops[node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"] += 1
    opsets = {(entry.domain or "ai.onnx"): entry.version for entry in model.opset_import}
    return {
        "path": str(path),
        "file_bytes": path.stat().st_size,
        "name": model.graph.name,
        "ir_version": model.ir_version,
        "opset": max((v for d, v in opsets.items() if d in DEFAULT_DOMAINS or d == "ai.onnx"), default=0),
        "opsets": opsets,
        "producer": " ".join(p for p in (model.producer_name, model.producer_version) if p),
        "inputs": [value_facts(value) for value in _graph_inputs(model)],
        "outputs": [value_facts(value) for value in model.graph.output],
        "nodes": len(model.graph.node),
        "nodes_with_subgraphs": sum(ops.values()),
        "op_histogram": dict(sorted(ops.items(), key=lambda item: (-item[1], item[0]))),
        "local_functions": [f.name for f in model.functions],
        "weights": _weights(model, graphs),
        "subgraphs": _control_flow(model.graph),
        "authored": _authored(model, graphs),
    }


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a user feeds: an input that is also an initializer (IR < 4 exports) is a weight."""
    weights = {tensor.name for tensor in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in weights]


def _weights(model: onnx.ModelProto, graphs: list[onnx.GraphProto]) -> dict:
    count, total, external = 0, 0, {}
    for graph in graphs:
        for tensor in graph.initializer:
            count += 1
            size = tensor_nbytes(tensor)
            total += size
            if is_on_disk(tensor):
                file, _offset, _length = on_disk_span(tensor)
                entry = external.setdefault(file.name, {"tensors": 0, "bytes": 0})
                entry["tensors"] += 1
                entry["bytes"] += size
    return {"initializers": count, "bytes": total, "external_files": external}


def _control_flow(graph: onnx.GraphProto, prefix: str = "") -> list[dict]:
    """Every If/Loop/Scan (any node holding a graph): where, its op, each body's node count, nested ones too."""
    found = []
    for node in graph.node:
        for attribute in node.attribute:
            bodies = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            for body in bodies:
                where = f"{prefix}{node.name or node.output[0]}"
                found.append({"node": where, "op_type": node.op_type, "body": attribute.name,
                              "nodes": len(body.node)})
                found.extend(_control_flow(body, f"{where}/{attribute.name}/"))
    return found


def _authored(model: onnx.ModelProto, graphs: list[onnx.GraphProto]) -> dict:
    weights: Counter = Counter()
    casts: Counter = Counter()
    qdq: Counter = Counter()
    code_types: set[str] = set()
    for graph in graphs:
        produced_types = {t.name: t.data_type for t in graph.initializer}
        for tensor in graph.initializer:
            if tensor.data_type in LOW_PRECISION:
                weights[LOW_PRECISION[tensor.data_type]] += 1
        for node in graph.node:
            if node.op_type == "Cast":
                to = next((a.i for a in node.attribute if a.name == "to"), None)
                if to in LOW_PRECISION:
                    casts[LOW_PRECISION[to]] += 1
            elif node.op_type in QDQ_OPS and node.domain in DEFAULT_DOMAINS:
                qdq[node.op_type] += 1
                codes = produced_types.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
                code_types.add(type_name(codes) if codes is not None else
                               "int8" if node.op_type == "QuantizeLinear" else "unknown")
    io = [v.name for v in [*model.graph.input, *model.graph.output]
          if v.type.tensor_type.elem_type in LOW_PRECISION]
    return {"low_precision_weights": dict(weights), "casts_to_low_precision": dict(casts),
            "low_precision_io": io, "qdq": dict(qdq), "quantized_code_types": sorted(code_types - {"unknown"})}
