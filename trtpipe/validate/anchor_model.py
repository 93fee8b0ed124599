"""The anchor of a quantized model's verdict (anchored.py): the float model, or one derived from the QDQ model.

- With `validate.float_model` (the model the quantizer started from), the anchor is that model.
- Without it, the anchor is the QDQ model with its activation QuantizeLinear -> DequantizeLinear
  pairs removed (the DQ's readers read the Q's input) and every weight's DequantizeLinear kept.
  Why: the candidate's distance from the QDQ model is dominated by activation codes that FP16 moves
  by one step; the activations without quantization are the truth those codes approximate. The
  weights' quantization is in the reference, the candidate and this anchor alike, so it cancels, and
  a user without the float model still gets the criterion. (Against the float model the QDQ model
  is further away, by what weight quantization costs too: the widened bounds are larger there.)

Decisions:
- A Q is a weight's when its input is computed from initializers and Constant nodes alone (ModelOpt
  FP8 quantizes FP32 weights by a Q at run time; such a Q/DQ pair is kept).
- A pair is removed only where the DQ's output type is the Q's input type (both scales are constants
  of one type), so the anchor computes in the reference's types; a DQ that is a graph output becomes
  an Identity of the Q's input (the output's name stays the model's). A Q whose codes another node
  reads besides the DQ stays, for that reader.
- Only the main graph is rewritten (a subgraph that reads a removed DQ's output by its outer name
  reads the Q's input instead); Q/DQ inside subgraphs stay.
- Used only for a model with a QuantizeLinear in its main graph (`is_quantized`): every other model
  has no anchor, so its verdict is the one it always had.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.validate.anchored import Anchor
from trtpipe.validate.code_agreement import constant_types

QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
DERIVED = "derived"
FLOAT_MODEL = "validate.float_model"


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(node.op_type == QUANTIZE and node.domain in DEFAULT_DOMAINS for node in model.graph.node)


def anchor_for(model: onnx.ModelProto, float_model: Path | None, feeds: list[dict]) -> Anchor | None:
    """The anchor's outputs on `feeds` (module docstring), or None: a model without Q/DQ, or no pair to remove."""
    from trtpipe.numerics.reference import ReferenceRunner
    from trtpipe.onnxmodel.onnx_io import load_model

    if not is_quantized(model):
        return None
    if float_model is not None:
        anchor, source, description = load_model(float_model, weights_on_disk=True), FLOAT_MODEL, str(float_model)
    else:
        anchor, removed = without_activation_qdq(model)
        if not removed:
            return None
        source, description = DERIVED, (f"the QDQ model without its {removed} activation "
                                        "QuantizeLinear/DequantizeLinear pair(s), weight DequantizeLinear kept")
    runner = ReferenceRunner(anchor)
    runs = [runner.run(feeds_i) for feeds_i in feeds]
    return Anchor(runs, source, description)


def without_activation_qdq(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` without its activation Q -> DQ pairs, and how many were removed."""
    graph = model.graph
    constant = _constant_tensors(graph)
    types = constant_types(graph)
    producer = {out: node for node in graph.node for out in node.output}
    graph_outputs = {value.name for value in graph.output}
    source: dict[str, str] = {}  # a removed DQ's output -> the Q input its readers read instead
    for node in graph.node:
        if node.op_type != DEQUANTIZE or node.domain not in DEFAULT_DOMAINS:
            continue
        quantize = producer.get(node.input[0])
        if quantize is None or quantize.op_type != QUANTIZE or quantize.domain not in DEFAULT_DOMAINS:
            continue
        scale_types = {types.get(quantize.input[1]), types.get(node.input[1])}
        if quantize.input[0] in constant or len(scale_types) != 1 or None in scale_types:
            continue
        source[node.output[0]] = source.get(quantize.input[0], quantize.input[0])
    anchor = onnx.ModelProto()
    anchor.CopyFrom(model)
    if not source:
        return anchor, 0
    _read_sources(anchor.graph, source)
    kept = []
    for node in anchor.graph.node:
        if node.op_type == DEQUANTIZE and node.output[0] in graph_outputs and node.output[0] in source:
            kept.append(onnx.helper.make_node("Identity", [source[node.output[0]]], [node.output[0]], name=node.name))
        elif not (node.op_type == DEQUANTIZE and node.output[0] in source):
            kept.append(node)
    read = {name for node in kept for name in _inputs(node)} | graph_outputs
    kept = [node for node in kept if not (node.op_type == QUANTIZE and node.domain in DEFAULT_DOMAINS
                                          and not any(out in read for out in node.output))]
    removed_names = {out for node in anchor.graph.node for out in node.output} - {out for n in kept for out in n.output}
    del anchor.graph.node[:]
    anchor.graph.node.extend(kept)
    values = [value for value in anchor.graph.value_info if value.name not in removed_names]
    del anchor.graph.value_info[:]
    anchor.graph.value_info.extend(values)
    return anchor, len(source)


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed from initializers and Constant nodes alone (main graph, topological order)."""
    constant = {tensor.name for tensor in graph.initializer}
    for node in graph.node:
        inputs = [name for name in node.input if name]
        if node.op_type == "Constant" or (inputs and all(name in constant for name in inputs)
                                          and not node.op_type.startswith("Random")):
            constant.update(node.output)
    return constant


def _read_sources(graph: onnx.GraphProto, source: dict[str, str]) -> None:
    """Every reader of a removed DQ's output, subgraphs included, reads its source instead."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in source:
                node.input[index] = source[name]
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _read_sources(subgraph, source)


def _inputs(node: onnx.NodeProto) -> list[str]:
    """The node's inputs and the outer names its subgraphs read."""
    names = list(node.input)
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in subgraph.node:
                names += _inputs(inner)
    return names
