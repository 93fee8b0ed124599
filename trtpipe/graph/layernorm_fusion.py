"""Apply the LayerNorm rule (`layernorm_rule`) to a model: find, check, rewrite, clean up.

Why fuse: the decomposed form squares a difference and averages it; in FP16
that variance overflows 65504 and becomes inf (NaN in T5, artifacts in NAFNet).
`LayerNormalization` (opset >= 17) computes its statistics in FP32
(`stash_type=1`, the default) and TensorRT maps it to its normalization layer.

Decisions:
- Shapes are inferred first (on a copy, with data propagation): the rule needs
  the rank of x to tell trailing axes from others, and the shape a Reshape
  computes from `Shape` (jax2tf's keepdims=0 form).
- Matches are collected on the unmodified graph and must be disjoint; each is
  then rewritten gs-style: disconnect the last absorbed node's output, append
  the fused node producing that same tensor, and finally `cleanup().toposort()`.
  The output keeps its name, so consumers and graph outputs are untouched.
  `cleanup()` also drops Constant nodes that only fed absorbed nodes (and any
  node that was already dead: it cannot affect outputs).
- The fused node is named after the common exporter scope of the absorbed
  nodes + `/LayerNormalization` (else the first absorbed name +
  `/LayerNormalization`), made unique; the absorbed names are returned and
  recorded in the model metadata (`absorbed_nodes`).
- A refusal is logged at INFO with its reason and returned, once per anchor
  (the first ReduceMean), unless a later pattern variant fused that anchor.
- Linear in graph size: graphsurgeon's producer/consumer links are built once
  at import, and each candidate root costs a bounded pattern walk.
"""

from __future__ import annotations

import logging

import onnx
import onnx_graphsurgeon as gs

from trtpipe.graph import value_info
from trtpipe.graph.parser_names import unique_name
from trtpipe.graph.absorbed_nodes import record_absorbed_nodes
from trtpipe.graph.gs_bridge import graph_from_model, model_from_graph
from trtpipe.graph.layernorm_rule import ANCHOR, FUSED_OP, PATTERNS, check, rewrite
from trtpipe.graph.opset import default_opset
from trtpipe.graph.pattern import Match, match

logger = logging.getLogger(__name__)

MIN_OPSET = 17


def fuse_layernorms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """Fuse every safe decomposed LayerNorm; returns (model, report).

    The input model is not modified; when nothing is fused it is returned as is.
    Report: `fused` [{node, absorbed, axis, affine}], `refused` [{anchor, reason}].
    Raises ValueError below opset 17 (the caller converts the opset first).
    """
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise ValueError(
            f"LayerNorm fusion needs opset >= {MIN_OPSET} but the model has opset {opset}; convert it first"
        )
    working = onnx.ModelProto()
    working.CopyFrom(model)  # cheap: weights of a large model stay on disk (weights_on_disk.py)
    graph = graph_from_model(_infer_shapes_with_data(value_info.infer_shapes(working)))
    accepted, refused, notes = _find_matches(graph)
    report: dict = {"fused": [], "refused": refused}
    if not accepted:
        return model, report

    taken_names = {node.name for node in graph.nodes}
    fused_outputs = []
    for found in accepted:
        absorbed = [node.name for node in found.ordered_nodes() if node.name]
        name = unique_name(_fused_name(absorbed), taken_names)
        taken_names.add(name)
        fused = rewrite(found, name)
        found.root.outputs.clear()  # disconnect: the tensor now comes from the fused node
        graph.nodes.append(fused)
        fused_outputs.append(fused.outputs[0].name)
        axis = fused.attrs["axis"]
        entry = {"node": name, "absorbed": absorbed, "axis": axis, "affine": "gamma" in found.values}
        if found.nodes[ANCHOR].name in notes:
            entry["note"] = f"gamma/beta left as Mul/Add: {notes[found.nodes[ANCHOR].name]}"
        report["fused"].append(entry)
        logger.info("fused %d nodes into %s (axis %d)", len(absorbed), name, axis)
    graph.cleanup().toposort()

    fused_model = model_from_graph(graph, like=model)
    value_info.strip_value_info(fused_model, changed=fused_outputs)
    record_absorbed_nodes(fused_model, {entry["node"]: entry["absorbed"] for entry in report["fused"]})
    return fused_model, report


def _infer_shapes_with_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference with data propagation for the main graph (in place on the working copy).

    Decision: data propagation follows `Shape -> Slice -> Concat` into a Reshape's
    target, so jax2tf's `Reshape(mean, [batch, 1])` has the shape [unk, 1]; that is
    what lets the rule prove the reshape restores the keepdims form. Runs on a
    weightless copy (value_info.weightless_copy): it never reads weights. If it fails,
    the shapes inferred without data stay (the keepdims=0 form is then refused).
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(value_info.weightless_copy(model), strict_mode=False,
                                                     data_prop=True)
    except Exception as error:  # onnx raises several types from C++; fusion must not fail for it
        logger.info("shape inference with data propagation failed (%s); reshape targets stay unknown", error)
        return model
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for output, typed in zip(model.graph.output, inferred.graph.output):
        output.type.CopyFrom(typed.type)
    return model


def _find_matches(graph: gs.Graph) -> tuple[list[Match], list[dict], dict[str, str]]:
    """Accepted matches (disjoint); one refusal per anchor never fused; and, for
    anchors fused by a shorter variant, why the longer one was refused."""
    graph_outputs = {tensor.name for tensor in graph.outputs}
    claimed: set[int] = set()
    accepted: list[Match] = []
    reasons: dict[str, str] = {}
    fused_anchors: set[str] = set()
    for pattern in PATTERNS:
        for node in graph.nodes:
            if node.op != pattern.root.op_type:
                continue
            found = match(pattern, node)
            if found is None or any(id(n) in claimed for n in found.nodes.values()):
                continue
            anchor = found.nodes[ANCHOR].name
            reason = check(found, graph_outputs)
            if reason is None:
                claimed.update(id(n) for n in found.nodes.values())
                accepted.append(found)
                fused_anchors.add(anchor)
            elif anchor not in reasons:
                reasons[anchor] = reason
    refused = [{"anchor": a, "reason": r} for a, r in reasons.items() if a not in fused_anchors]
    for entry in refused:
        logger.info("LayerNorm at %s not fused: %s", entry["anchor"], entry["reason"])
    notes = {a: r for a, r in reasons.items() if a in fused_anchors}
    return accepted, refused, notes


def _fused_name(absorbed: list[str]) -> str:
    """Common exporter scope + /LayerNormalization, else first absorbed name + /LayerNormalization."""
    if absorbed and all("/" in name for name in absorbed):
        scopes = [name.rsplit("/", 1)[0].split("/") for name in absorbed]
        common = []
        for parts in zip(*scopes):
            if len(set(parts)) != 1:
                break
            common.append(parts[0])
        scope = "/".join(common)
        if scope.strip("/"):
            return f"{scope}/{FUSED_OP}"
    return f"{absorbed[0]}/{FUSED_OP}" if absorbed else FUSED_OP

