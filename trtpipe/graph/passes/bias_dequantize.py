"""Fold a DequantizeLinear of INT32 codes that feeds a Conv/Gemm bias into an FP32 constant.

What the trap is. ONNX Runtime's `quantize_static` (QDQ format) stores each Conv/Gemm bias as
INT32 codes read through a DequantizeLinear whose scale is input scale x weight scale. TensorRT
has no INT32 DequantizeLinear: TensorRT-RTX 1.7.1 then lowers *every* Q/DQ of the model to FP32
constants (measured on ResNet-18 quantized by ONNX Runtime, issue 31: 840
`__trt_rtx_qdq_lowered_...` entries, its 20 convs float x float, a 49 MB engine instead of
14 MB). The same model with those bias DQs folded into FP32 constants built INT8 again. Measured
again on a two-Conv + Gemm model (tests/test_rtx_oracle_bias_dequantize.py): its build imports the
bias and the weight DQs as FP32 constants (`..._w_DequantizeLinear_Output_folded_constant`); folded,
none, and every weight DQ reaches the parser as a node reading INT8 codes. The
bias of a quantized Conv is FP32 in TensorRT's own explicit-quantization form (and in ModelOpt's).

What we change. A main-graph, default-domain DequantizeLinear is folded when:
- its input 0 is an INT32 constant (initializer or Constant node), its scale an FP32 constant
  (its output type is then FP32, as the folded constant's is), its zero point absent or an INT32
  constant, and it has no `block_size` (blocked quantization is another form, left alone);
- every reader of its output reads it as input 2 (the bias) of a Conv or Gemm, and it is no
  graph output (a value someone asked for by name stays what it is).
The DQ is removed and its output name becomes an FP32 initializer, so the Conv/Gemm reads the same
name; the codes, scale and zero point go when nothing else reads them.

The value is ONNX Runtime's: its CPU DequantizeLinear computes, per element, the code minus the
zero point in int32, converted to float, times the float scale (one FP32 multiply, rounded once).
numpy does the same FP32 operations here, so ONNX Runtime gives the folded model's outputs bit for
bit the unfolded model's (tests/graph/test_bias_dequantize.py checks both the constant and the
outputs).

Decisions (each with its reason):
- Only INT32 codes: an INT8/UINT8/FP8 DQ is what TensorRT quantizes; folding it would lose INT8.
- Only the bias input of Conv/Gemm: that is the form ONNX Runtime writes and the one measured.
  An INT32 DQ read elsewhere is left, with its reason in the report (`bias_dequantize_kept`),
  and build's parser check still warns about its input type (trt/parser/qdq_types.py).
- Subgraphs (If/Loop/Scan bodies) are left alone, as the other sanitize passes do.
- The pass returns a new model (the one given stays as it was, so sanitize can undo it,
  undoable_passes.py), built without `CopyFrom` of the weights, and only when something is
  folded: a model without INT32 bias DQs comes back as the same object, at the cost of one scan.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.model_parts import model_without_initializers
from trtpipe.onnxmodel.weights_on_disk import tensor_array

logger = logging.getLogger(__name__)

DEQUANTIZE = "DequantizeLinear"
BIAS_READERS = frozenset({"Conv", "Gemm"})
BIAS_INPUT = 2
# Why, in the report and the stage line: the measured consequence of leaving them.
REASON = ("an INT32 DequantizeLinear feeding a Conv/Gemm bias made TensorRT-RTX 1.7.1 import the model's weight "
          "and bias Q/DQ as FP32 constants, its convs float x float (issue 31; tests/test_rtx_oracle_bias_dequantize.py); "
          "folded to the FP32 bias ONNX Runtime's DequantizeLinear computes")


def bias_dequantize_pass(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The sanitize pass (undoable_passes.GraphPass): the folded model and the report's facts
    (`bias_dequantize_folded`, `bias_dequantize_kept`, and `bias_dequantize_reason` when any was folded)."""
    result, facts = fold_bias_dequantize(model)
    folded = facts["folded"]
    if folded:
        # The stage line names the first few; the log has every one (a ResNet has one per conv).
        logger.info("sanitize: %d INT32 bias DequantizeLinear folded to FP32 constants (%s): %s", len(folded),
                    ", ".join(entry["node"] or entry["output"] for entry in folded), REASON)
    return result, {"bias_dequantize_folded": folded, "bias_dequantize_kept": facts["kept"],
                    **({"bias_dequantize_reason": REASON} if folded else {})}


def fold_bias_dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The model with every INT32 bias DequantizeLinear folded (module docstring), and the report's facts:
    `folded` (one entry per DQ: node, output, readers) and `kept` (INT32 DQs left, with the reason)."""
    graph = model.graph
    constants = _constants(graph)
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, index))
    graph_outputs = {value.name for value in graph.output}
    folded, kept, values = [], [], {}
    for position, node in enumerate(graph.node):
        if node.op_type != DEQUANTIZE or node.domain not in DEFAULT_DOMAINS:
            continue
        codes = constants.get(node.input[0])
        if codes is None or codes.data_type != TensorProto.INT32:
            continue  # not INT32 codes, or codes computed at run time: not this pass's form
        reason = _refusal(node, constants, readers.get(node.output[0], []), graph_outputs)
        if reason is not None:
            kept.append({"node": node.name, "output": node.output[0], "reason": reason})
            continue
        values[position] = dequantized(tensor_array(codes), tensor_array(constants[node.input[1]]),
                                       _zero_point(node, constants), _axis(node))
        folded.append({"node": node.name, "output": node.output[0], "shape": list(values[position].shape),
                       "readers": sorted({reader.name for reader, _ in readers[node.output[0]]})})
    facts = {"folded": folded, "kept": kept}
    if not values:
        return model, facts
    result = model_without_initializers(model)
    removed = [graph.node[position] for position in values]
    for position in sorted(values, reverse=True):
        del result.graph.node[position]
    gone = _unread(result.graph, {name for node in removed for name in node.input[:3] if name})
    for node in [node for node in result.graph.node if node.op_type == "Constant" and node.output[0] in gone]:
        result.graph.node.remove(node)
    result.graph.initializer.extend(tensor for tensor in graph.initializer if tensor.name not in gone)
    result.graph.initializer.extend(numpy_helper.from_array(value, model.graph.node[position].output[0])
                                    for position, value in values.items())
    return result, facts


def dequantized(codes: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int) -> np.ndarray:
    """ONNX Runtime's DequantizeLinear of INT32 codes with an FP32 scale: float(code - zero point) * scale,
    the subtraction in int32, the product one FP32 multiply; per axis when the scale is 1-D."""
    codes = codes.astype(np.int32)
    if zero_point is not None:
        codes = codes - _along(zero_point.astype(np.int32), codes.ndim, axis)
    return (codes.astype(np.float32) * _along(scale.astype(np.float32), codes.ndim, axis)).astype(np.float32)


def _along(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scalar as is; a 1-D per-axis array shaped to broadcast along `axis` of a rank-`rank` tensor."""
    if values.ndim == 0 or rank == 0:
        return values.reshape(()) if values.size == 1 and rank == 0 else values
    shape = [1] * rank
    shape[axis % rank] = values.shape[0]
    return values.reshape(shape)


def _refusal(node: onnx.NodeProto, constants: dict, readers: list, graph_outputs: set[str]) -> str | None:
    """Why this INT32 DequantizeLinear is not folded, or None when it is."""
    if len(node.input) < 2 or constants.get(node.input[1]) is None:
        return "its scale is not a constant"
    if constants[node.input[1]].data_type != TensorProto.FLOAT:
        return "its scale is not FP32 (the folded bias would not be ONNX Runtime's FP32 value)"
    if len(node.input) > 2 and node.input[2]:
        zero_point = constants.get(node.input[2])
        if zero_point is None or zero_point.data_type != TensorProto.INT32:
            return "its zero point is not an INT32 constant"
    if any(attribute.name == "block_size" and attribute.i for attribute in node.attribute):
        return "it is blocked quantization (block_size), another form"
    if node.output[0] in graph_outputs:
        return "its output is a graph output"
    if not readers:
        return "nothing reads its output"
    others = sorted({f"{reader.name or reader.op_type} input {index}" for reader, index in readers
                     if reader.op_type not in BIAS_READERS or index != BIAS_INPUT})
    if others:
        return f"it is read other than as a Conv/Gemm bias ({', '.join(others[:3])})"
    return None


def _zero_point(node: onnx.NodeProto, constants: dict) -> np.ndarray | None:
    return tensor_array(constants[node.input[2]]) if len(node.input) > 2 and node.input[2] else None


def _axis(node: onnx.NodeProto) -> int:
    return next((attribute.i for attribute in node.attribute if attribute.name == "axis"), 1)  # ONNX's default


def _constants(graph: onnx.GraphProto) -> dict[str, TensorProto]:
    """Name -> tensor of the main graph's initializers and Constant nodes holding a tensor value.

    Decision: an initializer that is also a graph input is a default the caller may override, no constant."""
    inputs = {value.name for value in graph.input}
    constants = {tensor.name: tensor for tensor in graph.initializer if tensor.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            value = next((attribute.t for attribute in node.attribute if attribute.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = value
    return constants


def _unread(graph: onnx.GraphProto, names: set[str]) -> set[str]:
    """Those of `names` that nothing in `graph` reads: no node input, no graph output, no outer-scope
    read of a body (a name a body reads counts as read)."""
    read = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
    for node in graph.node:
        for attribute in node.attribute:
            for body in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
                read |= _names_read_in(body)
    return names - read


def _names_read_in(graph: onnx.GraphProto) -> set[str]:
    names = {name for node in graph.node for name in node.input}
    for node in graph.node:
        for attribute in node.attribute:
            for body in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
                names |= _names_read_in(body)
    return names
