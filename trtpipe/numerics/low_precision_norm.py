"""A low-precision `LayerNormalization` emulated as TensorRT computes it under strong typing.

What TensorRT computes an FP16 normalization layer in: NVIDIA/TensorRT
include/NvInfer.h (10.12-10.16), INormalizationLayer::setComputePrecision:
"The compute precision defaults to DataType::kFLOAT32 ... Strongly typed
network rejects calls to this method since the compute precision is typically
controlled by casting the input tensors to the desired type"; the method is
deprecated in 10.16 and gone in 11.0, whose migration guide
(.agents/skills/trt-strong-typing-migration/SKILL.md) says "compute precision
follows input dtypes". The ONNX parser's `setComputePrecision(stash_type)`
(onnx/onnx-tensorrt onnxOpImporters.cpp, LayerNormalization) is what a strongly
typed network rejects. So the documentation does not promise FP32 statistics
for an FP16 LayerNormalization, and the emulation does not assume them:

    mean = E[x]; d = x - mean; var = E[d * d]; y = d / sqrt(var + eps) * scale + bias

is computed op by op (the ONNX function body of LayerNormalization) with every
intermediate rounded to the input's type, reductions accumulating in FP32 as the
rest of the emulation does (emulated_graph.py). (x - E[x])² beyond 65504 is
therefore inf here, as it would be in FP16 kernels; the planner's range rule
measures exactly that intermediate (auto_range.py, hidden intermediates).

Limits: `axis` must be negative or the input's rank known (it is made negative);
otherwise, and for nodes that also output Mean/InvStdDev, the node is left to
compute in FP32 and a note says so.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def layernorm_in_low_precision(node: onnx.NodeProto, low_type: int, opset: int, rank: int | None,
                               unrounded_suffix: str) -> list[onnx.NodeProto] | None:
    """The op-by-op nodes replacing `node` (its output keeps its name, rounded); None if it cannot be emulated so."""
    if len([o for o in node.output if o]) != 1 or node.output[0] == "":
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    axis = int(attributes.get("axis", -1))
    if axis >= 0:
        if rank is None:
            return None
        axis -= rank
    axes = list(range(axis, 0))
    epsilon = float(attributes.get("epsilon", 1e-5))
    prefix = f"{node.name or node.output[0]}/trtpipe_{'bf16' if low_type == TensorProto.BFLOAT16 else 'fp16'}_norm"
    nodes: list[onnx.NodeProto] = []

    def step(op: str, inputs: list[str], tag: str, output: str | None = None, **attrs) -> str:
        raw = f"{prefix}/{tag}{unrounded_suffix}"
        nodes.append(helper.make_node(op, inputs, [raw], name=f"{prefix}/{tag}", **attrs))
        low = f"{prefix}/{tag}__low"
        nodes.append(helper.make_node("Cast", [raw], [low], name=f"{prefix}/{tag}/down", to=low_type))
        rounded = output or f"{prefix}/{tag}"
        nodes.append(helper.make_node("Cast", [low], [rounded], name=f"{prefix}/{tag}/up", to=TensorProto.FLOAT))
        return rounded

    def mean(tensor: str, tag: str) -> str:
        if opset >= 18:
            axes_name = f"{prefix}/axes"
            if not any(n.output[0] == axes_name for n in nodes):
                nodes.append(helper.make_node("Constant", [], [axes_name], name=axes_name,
                                              value=numpy_helper.from_array(np.array(axes, np.int64))))
            return step("ReduceMean", [tensor, axes_name], tag, keepdims=1)
        return step("ReduceMean", [tensor], tag, axes=axes, keepdims=1)

    eps_name = f"{prefix}/epsilon"
    stored_eps = np.float32(np.float16(epsilon)) if low_type == TensorProto.FLOAT16 else np.float32(epsilon)
    nodes.append(helper.make_node("Constant", [], [eps_name], name=eps_name,
                                  value=numpy_helper.from_array(np.array(stored_eps, np.float32))))
    x = node.input[0]
    centred = step("Sub", [x, mean(x, "mean")], "centred")
    variance = mean(step("Mul", [centred, centred], "squared"), "variance")
    deviation = step("Sqrt", [step("Add", [variance, eps_name], "variance_eps")], "std")
    normalised = step("Mul", [centred, step("Reciprocal", [deviation], "inv_std")], "normalised")
    has_bias = len(node.input) > 2 and node.input[2]
    scaled = step("Mul", [normalised, node.input[1]], "scaled", None if has_bias else node.output[0])
    if has_bias:
        step("Add", [scaled, node.input[2]], "biased", node.output[0])
    return nodes
