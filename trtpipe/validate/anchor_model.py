"""The anchor of a quantized model's verdict (anchored.py): the float model, or one derived from the QDQ model.

- With `validate.float_model` (the model the quantizer started from), the anchor is that model.
- Without it, the anchor is the QDQ model with each activation QuantizeLinear -> DequantizeLinear
  pair replaced by the pair's saturation alone: `Min(Max(x, lo), hi)` with `lo = (qmin - zp) * scale`
  and `hi = (qmax - zp) * scale`, the range the pair clips to, without its rounding. Every weight's
  DequantizeLinear is kept.
  Why: the candidate's distance from the QDQ model is dominated by activation codes that FP16 moves
  by one step; the activations without that rounding are the truth those codes approximate. The
  weights' quantization is in the reference, the candidate and this anchor alike, so it cancels, and
  a user without the float model still gets the criterion. (Against the float model the QDQ model
  is further away, by what weight quantization costs too: the widened bounds are larger there.)
  Why the saturation stays: ONNX Runtime's `quantize_static` with asymmetric activations (its
  default) deletes a Relu or Clip whose range the next QuantizeLinear already clips to (a zero
  point at the type's minimum). Found by trying it as a user (session 12): removing the pair
  outright removed the Relus with it, the anchor was 1.11 rel_l2 from the QDQ model (the float model:
  0.015), the widened bounds became rel_l2 1.20 and cosine_min 0.198, and any candidate passed.
  The saturation is part of the model the quantizer wrote; the rounding is the noise.

Decisions:
- A Q is a weight's when its input is computed from initializers and Constant nodes alone (ModelOpt
  FP8 quantizes FP32 weights by a Q at run time; such a Q/DQ pair is kept).
- A pair is replaced only where the DQ's output type is the Q's input type (both scales are constants
  of one type), so the anchor computes in the reference's types, and where the Q's scale is one
  constant value (per tensor) and its code type is known: a per-axis or blocked activation pair, or a
  scale or zero point computed at run time, stays quantized (the anchor is then closer to the QDQ
  model, the bounds narrower: never looser than the model warrants). The DQ's node becomes the Max
  and the Min, writing the DQ's output name, so its readers, graph outputs and subgraphs included,
  read the same name. A Q whose codes another node reads besides the DQ stays, for that reader.
- Only the main graph is rewritten; Q/DQ inside subgraphs stay.
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
        source, description = DERIVED, (f"the QDQ model with its {removed} activation QuantizeLinear/"
                                        "DequantizeLinear pair(s) reduced to their saturation (no rounding), "
                                        "weight DequantizeLinear kept")
    runner = ReferenceRunner(anchor)
    runs = [runner.run(feeds_i) for feeds_i in feeds]
    return Anchor(runs, source, description)


def without_activation_qdq(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` with its activation Q -> DQ pairs replaced by their saturation, and how many."""
    graph = model.graph
    constant = _constant_tensors(graph)
    types = constant_types(graph)
    values = _constant_values(graph)
    producer = {out: node for node in graph.node for out in node.output}
    ranges: dict[str, tuple] = {}  # a replaced DQ's output -> (the Q's input, lo, hi, the scale's type)
    for node in graph.node:
        if node.op_type != DEQUANTIZE or node.domain not in DEFAULT_DOMAINS:
            continue
        quantize = producer.get(node.input[0])
        if quantize is None or quantize.op_type != QUANTIZE or quantize.domain not in DEFAULT_DOMAINS:
            continue
        scale_types = {types.get(quantize.input[1]), types.get(node.input[1])}
        if quantize.input[0] in constant or len(scale_types) != 1 or None in scale_types:
            continue
        saturation = _saturation(quantize, values)
        if saturation is not None:
            ranges[node.output[0]] = (quantize.input[0], *saturation, scale_types.pop())
    anchor = onnx.ModelProto()
    anchor.CopyFrom(model)
    if not ranges:
        return anchor, 0
    kept = []
    for node in anchor.graph.node:
        if node.op_type == DEQUANTIZE and node.domain in DEFAULT_DOMAINS and node.output[0] in ranges:
            kept += _clip_nodes(anchor.graph, node, *ranges[node.output[0]])
        else:
            kept.append(node)
    read = {name for node in kept for name in _inputs(node)} | {value.name for value in graph.output}
    kept = [node for node in kept if not (node.op_type == QUANTIZE and node.domain in DEFAULT_DOMAINS
                                          and not any(out in read for out in node.output))]
    removed_names = {out for node in anchor.graph.node for out in node.output} - {out for n in kept for out in n.output}
    del anchor.graph.node[:]
    anchor.graph.node.extend(kept)
    value_info = [value for value in anchor.graph.value_info if value.name not in removed_names]
    del anchor.graph.value_info[:]
    anchor.graph.value_info.extend(value_info)
    return anchor, len(ranges)


# The codes each QuantizeLinear output type holds: (lowest, highest). Float types saturate to their
# largest finite value (saturate=1, ONNX's default for float8); a type not listed keeps its pair.
_CODE_RANGE = {
    onnx.TensorProto.INT8: (-128, 127), onnx.TensorProto.UINT8: (0, 255),
    onnx.TensorProto.INT16: (-32768, 32767), onnx.TensorProto.UINT16: (0, 65535),
    onnx.TensorProto.INT4: (-8, 7), onnx.TensorProto.UINT4: (0, 15),
    onnx.TensorProto.FLOAT8E4M3FN: (-448.0, 448.0), onnx.TensorProto.FLOAT8E4M3FNUZ: (-240.0, 240.0),
    onnx.TensorProto.FLOAT8E5M2: (-57344.0, 57344.0), onnx.TensorProto.FLOAT8E5M2FNUZ: (-57344.0, 57344.0),
}


def _saturation(quantize: onnx.NodeProto, values: dict) -> tuple[float, float] | None:
    """(lo, hi) the pair clips to, or None where it is not one constant range (the pair stays)."""
    import numpy as np

    scale = values.get(quantize.input[1])
    zero_point = values.get(quantize.input[2]) if len(quantize.input) > 2 and quantize.input[2] else None
    if scale is None or scale[0].size != 1 or (len(quantize.input) > 2 and quantize.input[2] and zero_point is None):
        return None
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in quantize.attribute}
    if attributes.get("saturate", 1) == 0 or attributes.get("block_size", 0):
        return None
    code_type = zero_point[1] if zero_point is not None else attributes.get("output_dtype") or onnx.TensorProto.UINT8
    if code_type not in _CODE_RANGE or (zero_point is not None and zero_point[0].size != 1):
        return None
    low, high = _CODE_RANGE[code_type]
    step = float(np.asarray(scale[0], np.float64).reshape(()))
    offset = float(np.asarray(zero_point[0], np.float64).reshape(())) if zero_point is not None else 0.0
    return (low - offset) * step, (high - offset) * step


def _clip_nodes(graph: onnx.GraphProto, dequantize: onnx.NodeProto, source: str, lo: float, hi: float,
                element_type: int) -> list[onnx.NodeProto]:
    """`Min(Max(source, lo), hi)` writing the DQ's output (Max and Min: every opset with Q/DQ has them)."""
    import numpy as np

    from onnx import numpy_helper

    dtype = onnx.helper.tensor_dtype_to_np_dtype(element_type)
    stem = f"{dequantize.name or dequantize.output[0]}__anchor_saturation"
    graph.initializer.extend([numpy_helper.from_array(np.array(lo, dtype), f"{stem}_lo"),
                              numpy_helper.from_array(np.array(hi, dtype), f"{stem}_hi")])
    return [onnx.helper.make_node("Max", [source, f"{stem}_lo"], [f"{stem}_floor"], name=f"{stem}_max"),
            onnx.helper.make_node("Min", [f"{stem}_floor", f"{stem}_hi"], [dequantize.output[0]], name=f"{stem}_min")]


def _constant_values(graph: onnx.GraphProto) -> dict:
    """Initializers and Constant nodes' values of the main graph: name -> (array, element type)."""
    from onnx import numpy_helper

    found = {tensor.name: tensor for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                found[node.output[0]] = value
    values = {}
    for name, tensor in found.items():
        try:
            values[name] = (numpy_helper.to_array(tensor), tensor.data_type)
        except Exception:  # a type NumPy cannot hold here: that pair stays  # noqa: BLE001
            continue
    return values


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed from initializers and Constant nodes alone (main graph, topological order)."""
    constant = {tensor.name for tensor in graph.initializer}
    for node in graph.node:
        inputs = [name for name in node.input if name]
        if node.op_type == "Constant" or (inputs and all(name in constant for name in inputs)
                                          and not node.op_type.startswith("Random")):
            constant.update(node.output)
    return constant


def _inputs(node: onnx.NodeProto) -> list[str]:
    """The node's inputs and the outer names its subgraphs read."""
    names = list(node.input)
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in subgraph.node:
                names += _inputs(inner)
    return names
