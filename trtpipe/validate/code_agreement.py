"""How many of a quantized model's run-time codes the candidate computes differently (issue 31, item 4).

A QuantizeLinear rounds its input to an INT8/UINT8/FP8 code. FP16 around it moves some inputs
across a rounding boundary, so the candidate's code differs from the reference's by one step
(measured on a BERT quantized by ModelOpt: about 7% of its int8 activation codes). That share says
what FP16 does to a quantized model more directly than the output error, so validate reports it
(`validation.json` `quantized.codes`, and a console line) for the emulated candidate.

Which codes: the first output of every main-graph, default-domain QuantizeLinear that the reference
and the candidate both have (names are kept by every stage). Codes of constant inputs (a weight
quantized by a Q, ModelOpt's FP8 form) count too: FP16 weights change their codes as well.

How they are compared: ONNX Runtime returns INT8/UINT8 codes as integers and float8 codes as their
uint8 bit patterns; a code differs when its value (its bits) differs. For integer codes the largest
difference is also given in steps (`max_step`); for float8 codes a step has no single size and is
not given. An engine's codes are not observable (its candidate is not counted).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS

QUANTIZE = "QuantizeLinear"
INTEGER_CODES = {TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.INT16: "int16",
                 TensorProto.UINT16: "uint16", TensorProto.INT4: "int4", TensorProto.UINT4: "uint4"}


def code_tensors(reference: onnx.ModelProto, candidate: onnx.ModelProto) -> dict[str, str]:
    """Code tensor name -> its type's name (`int8`, `float8e4m3fn`...), for the Q outputs both models have."""
    in_candidate = {node.output[0] for node in candidate.graph.node
                    if node.op_type == QUANTIZE and node.domain in DEFAULT_DOMAINS}
    types = constant_types(reference.graph)
    codes = {}
    for node in reference.graph.node:
        if node.op_type != QUANTIZE or node.domain not in DEFAULT_DOMAINS or node.output[0] not in in_candidate:
            continue
        # The zero point's type is the code's; without one, or one computed at run time, read the
        # `output_dtype` attribute (opset 21), else ONNX's default, uint8.
        zero_point = node.input[2] if len(node.input) > 2 and node.input[2] else None
        dtype = types.get(zero_point) if zero_point else None
        dtype = dtype or next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), TensorProto.UINT8)
        codes[node.output[0]] = INTEGER_CODES.get(dtype) or TensorProto.DataType.Name(dtype).lower()
    return codes


def code_agreement(reference_runs: list[dict], candidate_runs: list[dict], codes: dict[str, str]) -> dict | None:
    """`{types, tensors, compared, differ, share, max_step}` over every iteration, or None without codes."""
    compared = differ = 0
    max_step, tensors = None, set()
    for reference, candidate in zip(reference_runs, candidate_runs):
        for name, kind in codes.items():
            if name not in reference or name not in candidate:
                continue
            ours, theirs = np.asarray(reference[name]), np.asarray(candidate[name])
            if ours.shape != theirs.shape:
                continue
            tensors.add(name)
            different = ours != theirs
            compared += ours.size
            differ += int(np.count_nonzero(different))
            if kind in INTEGER_CODES.values() and ours.size:
                step = int(np.abs(ours.astype(np.int64) - theirs.astype(np.int64)).max())
                max_step = step if max_step is None else max(max_step, step)
    if not compared:
        return None
    return {"types": sorted({codes[name] for name in tensors}), "tensors": len(tensors), "compared": compared,
            "differ": differ, "share": differ / compared, "max_step": max_step}


def constant_types(graph: onnx.GraphProto) -> dict[str, int]:
    types = {tensor.name: tensor.data_type for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                types[node.output[0]] = value.data_type
    return types
