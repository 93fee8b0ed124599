"""The FP32 baseline (`precision.default=fp32`): the written model computes in FP32, whatever
type the source model stores and computes in.

Decisions:
- `default: fp32` is a baseline, so an author's FP16/BF16 compute is promoted to FP32:
  `precision.respect_authored` applies to a low-precision default only. Kept as authored, an
  FP16-stored model came back unchanged from `+recipe=fp32` with "100% FLOPs low precision"
  (issue 30), which is no baseline. A user who wants the model as authored runs without the
  precision stage; user rules still apply on top of the promotion, as on any default.
- Promoted: every node but a Cast that reads or writes an FP16/BF16 tensor in the source,
  comparisons and arg-max included (no float output, but their inputs would be cast back
  to FP16 for them). Its reason says so; `baseline.promoted` in the plan counts them.
- An author's Cast to or from FP16/BF16 is a precision boundary, not arithmetic: it is planned
  fp32, reads whatever arrives, and a Cast to FP16/BF16 casts to FP32 instead
  (materialize/node_types.py `_promoted_cast`). A Cast of the same type then changes nothing
  and goes with the redundant Casts (redundant_casts.py), unless it writes a graph output.
- The written model is checked, not assumed (`fp32_problems`): every node but a Cast reads
  and writes its float tensors in FP32 (FP64 is left as it is). A node the materialiser keeps
  in FP16/BF16 (an op of another domain, a Loop/Scan carrying FP16 state across iterations)
  refuses the run with one line naming it and why (exit 2): a "baseline" that still computes
  in FP16 would be a false comparison. Nodes a user rule sets to FP16/BF16 are the user's
  choice, not checked. Not checked: nodes with no float input whose output
  type an attribute sets (ConstantOfShape's `value`, RandomNormal's `dtype`, a Constant read
  only by a Cast): they compute nothing, and their FP16 values reach FP32 readers through an
  exact Cast; graph inputs and outputs kept in their type (`keep_io_types`), which only the
  boundary Casts read and write.
"""

from __future__ import annotations

import onnx

from trtpipe.errors import UserError
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs, has_body
from trtpipe.precision.materialize.node_types import decide_node_types
from trtpipe.precision.materialize.type_rules import opset_versions
from trtpipe.precision.network.decisions import Decision
from trtpipe.precision.network.element_types import LOW_PRECISION, RETYPABLE, short_name
from trtpipe.precision.network.network import Network

PROMOTED = "precision.default=fp32 (baseline): authored {types} compute promoted to FP32"
CAST_PROMOTED = ("Cast: a precision boundary the author placed ({source} -> {target}); the baseline "
                 "computes in FP32, so it reads what arrives and writes {written}")


def is_baseline(default: str) -> bool:
    return default == "fp32"


def promote_authored(net: Network, decisions: dict[str, Decision]) -> dict[str, Decision]:
    """Plan every node but a Cast that computes with FP16/BF16 in the source in FP32, with its
    reason (in place); returns them (name -> its decision), in network order.

    A node with no float output (Equal, Less...) counts when, kept, it would read an FP16/BF16
    input exactly (its inputs share a type variable): in FP32 it compares the FP32 values. One
    that reads any type as it arrives (Shape, ArgMax) needs nothing and stays `none`."""
    opsets = opset_versions(net.model)
    promoted: dict[str, Decision] = {}
    for name in net.names:
        decision = decisions[name]
        if net.op_type(name) == "Cast" or decision.precision not in ("fp32", "none"):
            continue  # keep: typed by an attribute, double, control flow (its body is promoted)
        low = [t for t in _tensors(net, name) if net.tensor_types.get(t) in LOW_PRECISION]
        if not low or (decision.precision == "none" and not _reads_low_exactly(net, name, opsets)):
            continue
        types = "/".join(sorted({short_name(net.tensor_types[t]).upper() for t in low}))
        decisions[name] = promoted[name] = Decision("fp32", PROMOTED.format(types=types), "default",
                                                    decision.observed_max_abs)
    return promoted


def baseline_note(net: Network, decisions: dict[str, Decision], promoted: dict[str, Decision]) -> dict:
    """`baseline` in the plan: the nodes promoted and still FP32 once the user rules applied, and
    the author's Casts retargeted."""
    kept = [name for name, decision in promoted.items() if decisions[name] is decision]
    casts = [name for name in net.names if net.op_type(name) == "Cast" and decisions[name].precision == "fp32"]
    types = {net.tensor_types.get(t) for name in [*kept, *casts] for t in _tensors(net, name)}
    return {"promoted": len(kept), "casts_promoted": len(casts),
            "types": "/".join(sorted(short_name(t).upper() for t in types & LOW_PRECISION)) or "FP16",
            "nodes": kept, "casts": casts}


def _reads_low_exactly(net: Network, name: str, opsets: dict[str, int]) -> bool:
    kept = decide_node_types(net.nodes[name], "keep", net.tensor_types, opsets)
    return any(r is not None and r.is_exact and r.cast_to in LOW_PRECISION for r in kept.inputs)


def cast_decision(net: Network, name: str) -> Decision | None:
    """An author's Cast to or from FP16/BF16, planned fp32 in the baseline; None for other Casts."""
    node = net.nodes[name]
    if node.domain not in DEFAULT_DOMAINS or not node.input or not node.input[0]:
        return None
    source, target = net.tensor_types.get(node.input[0]), net.tensor_types.get(node.output[0])
    if source not in LOW_PRECISION and target not in LOW_PRECISION:
        return None
    written = "FP32" if target in LOW_PRECISION else _type_name(target)
    return Decision("fp32", CAST_PROMOTED.format(source=_type_name(source), target=_type_name(target),
                                                 written=written), "structure")


def fp32_problems(model: onnx.ModelProto, types: dict[str, int],
                  planned_low: frozenset[str] = frozenset()) -> list[tuple[str, str, str, int]]:
    """(node, op type, tensor, type) for every FP16/BF16 tensor a node other than a Cast reads or
    writes in `model` (bodies included), skipping nodes with no float input whose output type an
    attribute sets (module docstring) and `planned_low`, the nodes a user rule sets to FP16/BF16.
    `types`: every tensor's element type."""
    found = []
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if (node.op_type in ("Cast", "CastLike") and node.domain in DEFAULT_DOMAINS) or node.name in planned_low:
                continue
            inputs = [t for t in node.input if t and types.get(t) is not None]
            if not has_body(node) and not any(types[t] in RETYPABLE for t in inputs):
                continue  # a generator (ConstantOfShape, RandomNormal, Constant): computes nothing
            for tensor in [*inputs, *(t for t in node.output if t)]:
                if types.get(tensor) in LOW_PRECISION:
                    found.append((node.name, node.op_type, tensor, types[tensor]))
    return found


def refuse_unless_fp32(model: onnx.ModelProto, types: dict[str, int], not_applied: list[dict],
                       planned_low: frozenset[str] = frozenset()) -> None:
    """One line (exit 2) naming the first node the baseline could not compute in FP32, and why.
    `planned_low`: nodes a user rule sets to FP16/BF16, which are not the baseline's to check."""
    problems = fp32_problems(model, types, planned_low)
    if not problems:
        return
    node, op_type, tensor, elem_type = problems[0]
    why = next((entry["reason"] for entry in not_applied if entry["node"] == node), None)
    if why is None and op_type in ("Loop", "Scan"):
        why = "a Loop/Scan keeps the declared type of the state it carries across iterations"
    why = why or "the materialiser keeps its types as the model has them"
    others = len({p[0] for p in problems}) - 1
    more = f" ({others} more node(s) like it)" if others else ""
    raise UserError(
        f"precision.default=fp32 (baseline) cannot compute {op_type} node '{node}' in FP32: it still "
        f"{'writes' if tensor in _outputs(model, node) else 'reads'} {short_name(elem_type).upper()} tensor "
        f"'{tensor}' because {why}{more}",
        "export that part in FP32 for a baseline, or compare the model as stored without an engine: "
        "'stages=[sanitize,upgrade_opset,validate]'")


def _tensors(net: Network, name: str) -> list[str]:
    node = net.nodes[name]
    return [t for t in (*node.input, *node.output) if t]


def _outputs(model: onnx.ModelProto, name: str) -> set[str]:
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if node.name == name:
                return set(node.output)
    return set()


def _type_name(elem_type: int | None) -> str:
    return short_name(elem_type).upper() if elem_type is not None else "untyped"
