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
  (the first ReduceMean), unless a later pattern variant fused that anchor;
  refusals and fusions are logged from the report of the path that wrote the
  model (once, also when the ModelProto path gave up for the round trip).
- Linear in graph size: producer/consumer indexes are built once, and each
  candidate root costs a bounded pattern walk.
- Two paths, one result: the ModelProto path (layernorm_proto.py: proto_view for
  matching, gs_export for writing) writes byte for byte what the onnx-graphsurgeon
  round trip writes, without the round trip (0.5 s of 0.85 s at 48 layers); the
  round trip stays for what the ModelProto path does not reproduce (If/Loop/Scan
  bodies, local functions, several producers of a tensor, ...: gs_export.OutOfScope,
  logged at DEBUG). bench/same_output/same_output.py (--stage upgrade_opset) checks the two agree across the corpora.
- The shape inference before matching and the one with data propagation share one
  weightless copy (value_info.infer_shapes_keeping_weightless): same bytes, one copy less.
"""

from __future__ import annotations

import logging

import onnx

from trtpipe.onnxmodel import value_info
from trtpipe.graph.names.parser_names import unique_name
from trtpipe.graph.names.absorbed_nodes import record_absorbed_nodes
from trtpipe.graph.onnx_gs.gs_bridge import graph_from_model, model_from_graph, restore_model_fields
from trtpipe.graph.onnx_gs.gs_export import OutOfScope
from trtpipe.graph.layernorm.layernorm_proto import candidates, matchable_graph, rewritten_model
from trtpipe.graph.layernorm.layernorm_rule import ANCHOR, FUSED_OP, PATTERNS, check, rewrite, trailing_axes
from trtpipe.graph.passes.opset import default_opset
from trtpipe.graph.layernorm.pattern import Match, match

logger = logging.getLogger(__name__)

MIN_OPSET = 17


def fuse_layernorms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """Fuse every safe decomposed LayerNorm; returns (model, report).

    The input model is not modified; when nothing is fused it is returned as is.
    Report: `fused` [{node, absorbed, axis, affine}], `refused` [{anchor, reason}].
    Raises ValueError below opset 17 (the caller converts the opset first).
    """
    return _fuse(model)[:2]


def fuse_layernorms_then_infer_shapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """`fuse_layernorms`, then `value_info.infer_shapes` of the result (what upgrade writes).

    Decision: when nothing is fused the result is `model` itself, whose shapes the
    fusion already inferred on an identical copy before matching; those are copied
    onto it instead of inferring again (same function of the same bytes, one pass less).
    """
    fused, report, inferred_copy = _fuse(model)
    if fused is not model:
        return value_info.infer_shapes(fused), report
    value_info.copy_inferred(inferred_copy, model)
    return model, report


def _fuse(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict, onnx.ModelProto]:
    """(result, report, a weightless copy of `model` holding value_info.infer_shapes' results)."""
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise ValueError(
            f"LayerNorm fusion needs opset >= {MIN_OPSET} but the model has opset {opset}; convert it first"
        )
    working, inferred_copy = _inferred_working_copy(model)
    try:
        fused, report = _fuse_on_proto(model, working)
    except OutOfScope as why:
        logger.debug("LayerNorm fusion through onnx-graphsurgeon: %s", why)
        fused, report = _fuse_with_graphsurgeon(model, working)
    _log(report)
    return fused, report, inferred_copy


def _log(report: dict) -> None:
    """Decision: logged once the path that writes the model has finished (the ModelProto path may refuse
    after matching, and the round trip then finds the same matches)."""
    for entry in report["refused"]:
        logger.info("LayerNorm at %s not fused: %s", entry["anchor"], entry["reason"])
    for entry in report["fused"]:
        logger.info("fused %d nodes into %s (axis %d)", len(entry["absorbed"]), entry["node"], entry["axis"])


def _inferred_working_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A copy of `model` with shapes inferred, then again with data propagation (what the rule
    reads), and the weightless copy the first inference ran on, holding its results (never
    changed by the second: ONNX's inference returns a new model)."""
    working = onnx.ModelProto()
    working.CopyFrom(model)  # cheap: weights of a large model stay on disk (weights_on_disk.py)
    working, weightless = value_info.infer_shapes_keeping_weightless(working)
    return _infer_shapes_with_data(working, weightless), weightless


def _fuse_on_proto(model: onnx.ModelProto, working: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The fast path (layernorm_proto.py): same matches, same written model, no round trip."""
    graph = matchable_graph(working)
    accepted, refused, notes = _find_matches(candidates(graph), {value.name for value in working.graph.output})
    report: dict = {"fused": [], "refused": refused}
    if not accepted:
        return model, report
    taken_names = {node.name for node in graph.nodes}
    names = []
    for found in accepted:
        names.append(_fused_entry(found, taken_names, notes, report))
    fused_model = rewritten_model(graph, accepted, names)
    return _finished(fused_model, model, [found.root.outputs[0].name for found in accepted], report)


def _fuse_with_graphsurgeon(model: onnx.ModelProto, working: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The round trip: import, rewrite gs-style, `cleanup().toposort()`, export."""
    graph = graph_from_model(working)
    accepted, refused, notes = _find_matches(
        lambda pattern: [node for node in graph.nodes if node.op in pattern.root.op_types],
        {tensor.name for tensor in graph.outputs})
    report: dict = {"fused": [], "refused": refused}
    if not accepted:
        return model, report

    taken_names = {node.name for node in graph.nodes}
    fused_outputs = []
    for found in accepted:
        fused = rewrite(found, _fused_entry(found, taken_names, notes, report))
        found.root.outputs.clear()  # disconnect: the tensor now comes from the fused node
        graph.nodes.append(fused)
        fused_outputs.append(fused.outputs[0].name)
    graph.cleanup().toposort()
    return _finished(model_from_graph(graph, like=model), model, fused_outputs, report)


def _fused_entry(found: Match, taken_names: set[str], notes: dict[str, str], report: dict) -> str:
    """Name the fused node (unique) and add its report entry; returns the name."""
    absorbed = [node.name for node in found.ordered_nodes() if node.name]
    name = unique_name(_fused_name(absorbed), taken_names)
    taken_names.add(name)
    count = len(trailing_axes(found))
    entry = {"node": name, "absorbed": absorbed, "axis": -count, "affine": "gamma" in found.values}
    if found.nodes[ANCHOR].name in notes:
        entry["note"] = f"gamma/beta left as Mul/Add: {notes[found.nodes[ANCHOR].name]}"
    report["fused"].append(entry)
    return name


def _finished(fused_model: onnx.ModelProto, model: onnx.ModelProto, fused_outputs: list[str],
              report: dict) -> tuple[onnx.ModelProto, dict]:
    restore_model_fields(fused_model, model)
    value_info.strip_value_info(fused_model, changed=fused_outputs)
    record_absorbed_nodes(fused_model, {entry["node"]: entry["absorbed"] for entry in report["fused"]})
    return fused_model, report


def _infer_shapes_with_data(model: onnx.ModelProto, weightless: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """ONNX shape inference with data propagation for the main graph (in place on the working copy).

    Decision: data propagation follows `Shape -> Slice -> Concat` into a Reshape's
    target, so jax2tf's `Reshape(mean, [batch, 1])` has the shape [unk, 1]; that is
    what lets the rule prove the reshape restores the keepdims form. Runs on a
    weightless copy (value_info.weightless_copy): it never reads weights. If it fails,
    the shapes inferred without data stay (the keepdims=0 form is then refused).
    """
    try:
        if weightless is None:
            weightless = value_info.weightless_copy(model)
        inferred = onnx.shape_inference.infer_shapes(weightless, strict_mode=False, data_prop=True)
    except Exception as error:  # onnx raises several types from C++; fusion must not fail for it
        logger.info("shape inference with data propagation failed (%s); reshape targets stay unknown", error)
        return model
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for output, typed in zip(model.graph.output, inferred.graph.output):
        output.type.CopyFrom(typed.type)
    return model


def _find_matches(candidates, graph_outputs: set[str]) -> tuple[list[Match], list[dict], dict[str, str]]:
    """Accepted matches (disjoint); one refusal per anchor never fused; and, for
    anchors fused by a shorter variant, why the longer one was refused.
    `candidates(pattern)`: the nodes, in graph order, where the pattern may match
    (at least every node of its root's op type where `match` succeeds)."""
    claimed: set[int] = set()
    accepted: list[Match] = []
    reasons: dict[str, str] = {}
    fused_anchors: set[str] = set()
    for pattern in PATTERNS:
        for node in candidates(pattern):
            if id(node) in claimed:  # a match would contain it, and be discarded below: skip the walk
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

