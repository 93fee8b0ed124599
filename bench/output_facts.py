"""What a converted model is, measured the same way for both tools: Casts, precisions, accuracy.

Nothing here trusts a tool's own report: every number is read off the
converted ONNX file (node types from ONNX shape inference) or measured by
running it.

- `casts`: Cast nodes in the converted model; `casts_added` subtracts those
  already in the input (the `mixed_precision` model arrives with 8).
- `fp32_nodes` / `fp16_nodes`: nodes that compute, i.e. have a float output,
  excluding Cast and Constant, whose float outputs are all FP32 / all FP16.
- `exclusions_honoured`: of the nodes both tools were told to keep FP32, how
  many compute in FP32 in the output, found by name (or, for AutoCast, by the
  name its graph sanitizer gives a LayerNorm it fused: `LayerNorm_<ReduceMean>`).
- accuracy: the converted model on trtpipe's faithful FP16 emulation
  (`EmulatedRunner`, every FP16 tensor rounded after every op) against the
  prepared FP32 model in ONNX Runtime (`ReferenceRunner`), per graph output,
  worst value over the evaluation inputs (`worst_metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from bench.converters import FUSED_LAYERNORM_PREFIX
from trtpipe.numerics.metrics import OutputMetrics, output_metrics, worst_metrics

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
NOT_COMPUTING = ("Cast", "Constant")


@dataclass
class ModelFacts:
    nodes: int
    casts: int
    casts_added: int
    fp32_nodes: int
    fp16_nodes: int
    exclusions_honoured: int
    exclusions_missing: list[str] = field(default_factory=list)  # excluded names not found in the output
    accuracy: dict[str, OutputMetrics] = field(default_factory=dict)

    def to_json(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "accuracy"}
        data["accuracy"] = {name: metrics.to_json() for name, metrics in self.accuracy.items()}
        return data


def model_facts(converted: onnx.ModelProto, source: onnx.ModelProto, excluded: list[str]) -> ModelFacts:
    precision = _node_precisions(converted)
    honoured, missing = 0, []
    for name in excluded:
        found = precision.get(name, precision.get(FUSED_LAYERNORM_PREFIX + name))
        if found is None:
            missing.append(name)
        elif found == TensorProto.FLOAT:
            honoured += 1
    casts = sum(node.op_type == "Cast" for node in converted.graph.node)
    return ModelFacts(
        nodes=len(converted.graph.node),
        casts=casts,
        casts_added=casts - sum(node.op_type == "Cast" for node in source.graph.node),
        fp32_nodes=sum(t == TensorProto.FLOAT for t in precision.values()),
        fp16_nodes=sum(t == TensorProto.FLOAT16 for t in precision.values()),
        exclusions_honoured=honoured,
        exclusions_missing=missing,
    )


def _node_precisions(model: onnx.ModelProto) -> dict[str, int | None]:
    """Computing node name -> the one type of its float outputs (None if they are mixed)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    precision = {}
    for node in graph.node:
        if node.op_type in NOT_COMPUTING:
            continue
        found = {types.get(t) for t in node.output if types.get(t) in FLOAT_TYPES}
        if found:
            precision[node.name] = found.pop() if len(found) == 1 else None
    return precision


def accuracy(reference_outputs: list[dict], converted: onnx.ModelProto, feeds: list[dict]) -> dict[str, OutputMetrics]:
    """Per graph output, the worst metrics of the emulated converted model over `feeds`."""
    from trtpipe.numerics.emulator import EmulatedRunner

    runner = EmulatedRunner(converted)
    runs = [runner.run(feed) for feed in feeds]
    return {
        name: worst_metrics([output_metrics(ref[name], run[name]) for ref, run in zip(reference_outputs, runs)])
        for name in reference_outputs[0]
    }


def reference_outputs(source: onnx.ModelProto, feeds: list[dict]) -> list[dict]:
    from trtpipe.numerics.reference import ReferenceRunner

    runner = ReferenceRunner(source)
    return [runner.run(feed) for feed in feeds]
