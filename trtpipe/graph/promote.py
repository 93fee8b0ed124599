"""The promote_outputs pass: expose chosen intermediate tensors as extra graph outputs.

Validation compares promoted tensors between the FP32 reference and a
candidate to find where accuracy is lost. Tensors are chosen by name
(`tensors`) or by the node that produces them (`nodes`, every output of the
node), each pattern `exact` or `regex` (a full match, `re.fullmatch`).

Decisions, with their reasons:
- Node patterns match the names TensorRT's parser gives layers (`layer_name`:
  the node name, or `node_of_<first output>`; repeats suffixed `_1`, `_2`, as
  in `precision.network`), so one name means the same layer in rules, plans,
  engine layers and here.
- A pattern that matches nothing is a `UserError` with the three closest names:
  a silently ignored pattern is the bug trtpipe exists to fix.
- Only tensors that a node of the main graph computes are promotable. Naming a
  graph input or an initializer exactly is a `UserError` (there is nothing to
  compare: it is fed or constant). A regex is matched only against promotable
  tensors, so it never sees inputs or initializers; if it hits nothing else it
  matches nothing, which is the error above. Tensors inside subgraphs (If, Loop)
  are not promotable: TensorRT cannot mark them as network outputs either.
- Existing outputs are never dropped, reordered or duplicated; a match that is
  already an output is listed under `already_outputs`, not promoted again.
- Order: the original outputs, then the promoted ones in node order and output
  index order. ONNX requires nodes in topological order (the checker enforces
  it and `sanitize` sorts), so this is a topological order and deterministic.
- `as_type="fp32"`: an FP16/BF16 tensor `t` is exposed through an added
  `Cast(to=FLOAT)` whose output is `t__fp32` (`_1`, `_2` appended if the name is
  taken). The original tensor is not renamed: renaming it would change the name
  of a tensor that rules, plans, the engine and the reference all use, and
  rewire its consumers. The report maps every output back to its tensor:
  `promoted: [{tensor, output_name, producer_node, dtype, output_dtype}]`.
- Types: stale `value_info` of promoted tensors is stripped before shape
  inference runs (ONNX merges with existing entries instead of replacing them),
  and each new output carries the inferred type and shape. A custom op's output
  keeps its author-written entry, the only source of its type; a tensor whose
  type stays unknown is a `UserError`, since a graph output must have a type.
- The model is edited as a ModelProto, not through onnx-graphsurgeon: the pass
  only appends outputs and Cast nodes, and a graphsurgeon round trip would
  rebuild every other part of the model for nothing (see `gs_bridge`).
- More than `warn_above` promoted tensors is a logged warning, also recorded in
  the report: in TensorRT each marked output stops fusion across it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe.graph.names.bounded_regex import fullmatches
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.errors import UserError
from trtpipe.onnxmodel import value_info
from trtpipe.graph.names.parser_names import parser_names, unique_name
from trtpipe.graph.names.promoted_names import record_promoted_outputs
from trtpipe.onnxmodel.onnx_io import load_model, save_model

logger = logging.getLogger(__name__)

MATCH_KINDS = ("exact", "regex")
AS_TYPES = ("fp32", "native")
LOW_PRECISION_FLOATS = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
FP32_SUFFIX = "__fp32"
MANY_OUTPUTS_WARNING = "in TensorRT, marking many outputs breaks layer fusion and changes what is measured"


def promote_outputs(
    src: Path,
    dst: Path,
    *,
    tensors: Sequence[str] = (),
    nodes: Sequence[str] = (),
    match: str = "exact",
    as_type: str = "fp32",
    warn_above: int = 16,
    hard_links_ok: bool = False,
) -> dict:
    """Read `src`, add the chosen tensors as graph outputs, write `dst`; returns a JSON-serialisable report.

    `hard_links_ok`: `src` is trtpipe's own file (see `onnx_io.load_model`)."""
    _check_choice("match", match, MATCH_KINDS)
    _check_choice("as_type", as_type, AS_TYPES)
    model = load_model(Path(src), weights_on_disk=True, hard_links_ok=hard_links_ok)
    graph = model.graph
    outputs_before = [value.name for value in graph.output]

    node_names = parser_names(graph.node)
    producer = {tensor: name for name, node in node_names.items() for tensor in node.output if tensor}
    matches = {
        "tensors": {p: _match_tensors(p, match, producer, graph) for p in tensors},
        "nodes": {p: _match_nodes(p, match, node_names) for p in nodes},
    }
    chosen = {t for names in matches["tensors"].values() for t in names}
    chosen |= {t for hits in matches["nodes"].values() for name in hits for t in node_names[name].output if t}
    already = [name for name in outputs_before if name in chosen]
    chosen.difference_update(already)
    promoted = [t for node in graph.node for t in node.output if t in chosen]

    # Stale entries would survive inference (it merges); custom ops keep theirs, nothing else can derive them.
    rederivable = [t for t in promoted if node_names[producer[t]].domain in DEFAULT_DOMAINS]
    stripped = value_info.strip_value_info(model, changed=rederivable)
    model = value_info.infer_shapes(model)
    types = {value.name: value.type for value in list(model.graph.value_info) + list(model.graph.output)}
    producers = {t: (producer[t], node_names[producer[t]]) for t in promoted}
    entries = _expose(model, promoted, types, producers, as_type)
    value_info.strip_value_info(model)  # promoted tensors are now described by their graph output

    warnings = []
    if len(promoted) > warn_above:
        warnings.append(f"{len(promoted)} tensors promoted (warn_above={warn_above}): {MANY_OUTPUTS_WARNING}")
        logger.warning("promote_outputs: %s", warnings[-1])
    record_promoted_outputs(model, {entry["output_name"]: entry["tensor"] for entry in entries})
    written = save_model(model, Path(dst))
    return {
        "match": match,
        "as_type": as_type,
        "outputs_before": outputs_before,
        "promoted": entries,
        "already_outputs": already,
        "matches": matches,
        "value_info_stripped": stripped,
        "warnings": warnings,
        "files": [path.name for path in written],
    }


def may_expose(output: str, tensors: Sequence[str], match: str) -> bool:
    """Whether promoting the tensor patterns `tensors` can expose a graph output named `output`:
    the tensor itself, or its FP32 copy `t__fp32` (`t__fp32_1`, ... when taken).

    Decision: decided from the names alone, without the graph the pass will read (the earlier
    stages make it), so that a misspelled `validate.outputs.<name>` is refused before any stage
    runs; a tensor pattern exposes only tensors whose names it matches, whatever the graph."""
    _check_choice("match", match, MATCH_KINDS)
    names = list(dict.fromkeys([output, re.sub(re.escape(FP32_SUFFIX) + r"(_\d+)?$", "", output)]))
    if match == "exact":
        return any(name in tensors for name in names)
    return any(fullmatches(_compile(pattern), names, f"promote_outputs.tensors pattern {pattern!r}")
               for pattern in tensors)


def _check_choice(key: str, value: str, valid: Sequence[str]) -> None:
    if value not in valid:
        from trtpipe.config.override_text import choice_fix

        raise UserError(f"promote_outputs.{key} is {value!r}", choice_fix(f"promote_outputs.{key}", value, valid))




def _match_tensors(pattern: str, match: str, producer: dict, graph: onnx.GraphProto) -> list[str]:
    if match == "exact":
        if pattern in producer:
            return [pattern]
        initializers = {tensor.name for tensor in graph.initializer}
        if pattern in initializers or pattern in {value.name for value in graph.input}:
            kind = "an initializer" if pattern in initializers else "a graph input"
            raise UserError(
                f"promote_outputs: tensor {pattern!r} is {kind}, not computed by the model, so it cannot be promoted",
                "remove it from promote_outputs.tensors; only tensors that nodes produce can be promoted",
            )
        hits = []
    else:
        regex = _compile(pattern)
        hits = fullmatches(regex, list(producer), f"promote_outputs.tensors pattern {pattern!r}")
    if not hits:
        _raise_unmatched("tensor", pattern, match, list(producer))
    return hits


def _match_nodes(pattern: str, match: str, node_names: dict) -> list[str]:
    if match == "exact":
        hits = [pattern] if pattern in node_names else []
    else:
        regex = _compile(pattern)
        hits = fullmatches(regex, list(node_names), f"promote_outputs.nodes pattern {pattern!r}")
    if not hits:
        _raise_unmatched("node", pattern, match, list(node_names))
    return hits


def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise UserError(
            f"promote_outputs: pattern {pattern!r} is not a valid regular expression ({error})",
            "correct the pattern (it must match the whole name, as re.fullmatch does), or use match=exact",
        ) from None


def _raise_unmatched(kind: str, pattern: str, match: str, names: list[str]) -> None:
    from trtpipe.config.closest import closest as closest_names

    closest = closest_names(pattern, names, n=3, cutoff=0.0)
    raise UserError(
        f"promote_outputs: {kind} pattern {pattern!r} ({match}) matches no {kind}",
        f"closest {kind} names: {', '.join(repr(name) for name in closest) or 'none (empty graph)'}",
    )


def _expose(model: onnx.ModelProto, promoted: list[str], types: dict, producers: dict, as_type: str) -> list[dict]:
    """Append a graph output (through a Cast where asked) for each promoted tensor; returns the report entries.

    `producers` maps each promoted tensor to (layer name, node) of the node computing it.
    """
    graph = model.graph
    taken_tensors = (
        {t for node in graph.node for t in list(node.input) + list(node.output)}
        | {value.name for value in list(graph.input) + list(graph.output)}
        | {tensor.name for tensor in graph.initializer}
    )
    taken_nodes = set(parser_names(graph.node))
    entries = []
    for tensor in promoted:
        tensor_type = types.get(tensor)
        if tensor_type is None or not tensor_type.tensor_type.elem_type:
            name, node = producers[tensor]
            raise UserError(
                f"promote_outputs: the type of tensor {tensor!r} (output of {node.op_type} node "
                f"{name!r}) is unknown to ONNX shape inference, and a graph output needs one",
                "add a value_info entry with its type to the model, or promote a different tensor",
            )
        elem_type = tensor_type.tensor_type.elem_type
        output = onnx.ValueInfoProto(name=tensor)
        output.type.CopyFrom(tensor_type)
        if as_type == "fp32" and elem_type in LOW_PRECISION_FLOATS:
            output.name = _claim(tensor + FP32_SUFFIX, taken_tensors)
            output.type.tensor_type.elem_type = TensorProto.FLOAT
            cast_name = _claim(f"{output.name}/Cast", taken_nodes)
            graph.node.append(helper.make_node("Cast", [tensor], [output.name], name=cast_name, to=TensorProto.FLOAT))
        graph.output.append(output)
        entries.append(
            {
                "tensor": tensor,
                "output_name": output.name,
                "producer_node": producers[tensor][0],
                "dtype": _dtype_name(elem_type),
                "output_dtype": _dtype_name(output.type.tensor_type.elem_type),
            }
        )
    casts = sum(entry["output_name"] != entry["tensor"] for entry in entries)
    logger.info("promoted %d tensors to graph outputs (%d through a Cast to FP32)", len(entries), casts)
    return entries


def _claim(base: str, taken: set[str]) -> str:
    name = unique_name(base, taken)
    taken.add(name)
    return name


def _dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()
