"""What a converted model is, measured the same way for both tools: Casts, precisions, accuracy.

Nothing here trusts a tool's own report: every number is read off the
converted ONNX file (node types from ONNX shape inference) or measured by
running it.

- `casts`: Cast nodes in the converted model; `casts_added`: those of them not
  in the input by name (the `mixed_precision` model arrives with 8, some of which
  a tool may remove).
- `fp32_nodes` / `fp16_nodes`: nodes that compute, i.e. have a float output,
  excluding Cast and Constant, whose float outputs are all FP32 / all FP16.
- `exclusions_honoured`: of the nodes both tools were told to keep FP32, how
  many compute in FP32 in the output, found by any of their names
  (`converters.exclusion_aliases`: the fused LayerNorm, the nodes it absorbed,
  or the name AutoCast's sanitizer gives its own fusion, `LayerNorm_<ReduceMean>`);
  honoured when every alias found computes in FP32.
- `fp16_flop_share`: of the MatMul/Gemm/Conv FLOPs (trtpipe.precision.network.flops, with
  the shapes of the first evaluation input), the share computed by nodes whose
  float output is FP16. The same function for both tools' outputs.
- accuracy: the converted model on trtpipe's faithful FP16 emulation
  (`EmulatedRunner`, every FP16 tensor rounded after every op) against the
  prepared FP32 model in ONNX Runtime (`ReferenceRunner`), per graph output,
  worst value over the evaluation inputs (`worst_metrics`); `sample_metrics`
  keeps each input's metrics for the paired verdict (paired_accuracy.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto

from trtpipe.numerics.metrics import OutputMetrics, output_metrics

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
    fp16_flop_share: float = 0.0
    exclusions_missing: list[str] = field(default_factory=list)  # excluded names not found in the output
    accuracy: dict[str, OutputMetrics] = field(default_factory=dict)

    def to_json(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "accuracy"}
        data["accuracy"] = {name: metrics.to_json() for name, metrics in self.accuracy.items()}
        return data


def model_facts(converted: onnx.ModelProto, source: onnx.ModelProto, aliases: dict[str, list[str]],
                feed: dict) -> ModelFacts:
    precision = _node_precisions(converted)
    honoured, missing = 0, []
    for name, names in aliases.items():
        found = [precision[alias] for alias in names if alias in precision]
        if not found:
            missing.append(name)
        elif all(t == TensorProto.FLOAT for t in found):
            honoured += 1
    casts = sum(node.op_type == "Cast" for node in converted.graph.node)
    authored = _cast_names(source)
    return ModelFacts(
        nodes=len(converted.graph.node),
        casts=casts,
        casts_added=casts - sum(node.op_type == "Cast" and node.name in authored for node in converted.graph.node),
        fp32_nodes=sum(t == TensorProto.FLOAT for t in precision.values()),
        fp16_nodes=sum(t == TensorProto.FLOAT16 for t in precision.values()),
        exclusions_honoured=honoured,
        fp16_flop_share=fp16_flop_share(converted, feed),
        exclusions_missing=missing,
    )


def _cast_names(model: onnx.ModelProto) -> set[str]:
    return {node.name for node in model.graph.node if node.op_type == "Cast"}


def fp16_flop_share(converted: onnx.ModelProto, feed: dict) -> float:
    """Share of the heavy ops' FLOPs (shapes of `feed`) computed by nodes with an FP16 float output."""
    from trtpipe.precision.network.flop_shapes import record_feed_shapes
    from trtpipe.precision.network.flops import HEAVY_OPS, node_flops
    from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model

    model = onnx.ModelProto()
    model.CopyFrom(converted)
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    record_feed_shapes(net, feed)
    types = _tensor_types(model)
    total = low = 0
    for name, node in net.nodes.items():
        if node.op_type not in HEAVY_OPS:
            continue
        flops = node_flops(net, name)
        total += flops
        if node.output and types.get(node.output[0]) == TensorProto.FLOAT16:
            low += flops
    return low / total if total else 0.0


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    graph = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    return {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}


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


def sample_metrics(reference_outputs: list[dict], converted: onnx.ModelProto,
                   feeds: list[dict]) -> dict[str, list[OutputMetrics]]:
    """Per graph output, the metrics of the emulated converted model on each feed, in feed order."""
    from trtpipe.numerics.emulator import EmulatedRunner

    runner = EmulatedRunner(converted)
    runs = [runner.run(_as_input_types(converted, feed)) for feed in feeds]
    return {name: [output_metrics(ref[name], run[name]) for ref, run in zip(reference_outputs, runs)]
            for name in reference_outputs[0]}


def reference_outputs(source: onnx.ModelProto, feeds: list[dict]) -> list[dict]:
    from trtpipe.numerics.reference import ReferenceRunner

    runner = ReferenceRunner(source)
    return [runner.run(feed) for feed in feeds]


def _as_input_types(model: onnx.ModelProto, feed: dict) -> dict:
    """The feed in the converted model's input types (AutoCast's defaults turn float inputs to FP16)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    types = {value.name: value.type.tensor_type.elem_type for value in model.graph.input}
    return {name: array.astype(tensor_dtype_to_np_dtype(types[name])) if name in types and types[name] else array
            for name, array in feed.items()}


def kept_float_io(source: onnx.ModelProto, trtpipe: str | Path | None,
                  defaults: str | Path | None) -> list[str] | None:
    """The Cast allowance of issue 16, read off the two output files: the float graph inputs and
    outputs that trtpipe keeps in the raw export's type and AutoCast's defaults turn to FP16.
    None when either output is missing."""
    if trtpipe is None or defaults is None:
        return None
    floats = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16)
    ours, theirs = (_io_types(onnx.load(str(path), load_external_data=False)) for path in (trtpipe, defaults))
    return [name for name, elem in _io_types(source).items()
            if elem in floats and ours.get(name) == elem and theirs.get(name) == TensorProto.FLOAT16]


def _io_types(model: onnx.ModelProto) -> dict[str, int]:
    initializers = {t.name for t in model.graph.initializer}
    values = [v for v in model.graph.input if v.name not in initializers] + list(model.graph.output)
    return {value.name: value.type.tensor_type.elem_type for value in values}


def fp32_node_names(converted: onnx.ModelProto) -> list[str]:
    """Computing nodes whose float outputs are all FP32 (the `fp32_nodes` definition), for diffs of plans."""
    return sorted(name for name, elem in _node_precisions(converted).items() if elem == TensorProto.FLOAT)
