"""Automatic rule: every tensor the plan stores in FP16 must fit FP16, at both ends of its range.

The range rule (auto_range.py) judges what an FP16 node *produces*. A tensor an
FP32 producer hands to an FP16 consumer is cast to FP16 at the boundary, and a
value beyond 65504 is inf before the consumer runs (a power spectrum of 4e9
feeding `Log`, int32 accumulators dequantised to 1e5 feeding an FP16 `Mul`, a
graph input of raw audio under `keep_io_types=false`). This rule checks every
FP16 tensor of the plan against the FP32 reference run and keeps FP32 what it
must, with the reason.

Decisions:
- Which tensors are FP16 is read from the materialised model itself
  (`materialize`), not re-derived: boundary Casts, graph inputs under
  `keep_io_types=false`, inputs an op reads as produced, integer paths left
  alone are exactly what the materialiser does. Each materialised tensor is
  mapped back to the reference tensor holding its value (same node name and
  output slot; a Cast's output holds its input's value).
- Threshold: FP16's largest finite value, 65504, not `precision.auto.max_abs`.
  FP16's relative precision is the same at every magnitude, so a stored
  tensor's only hazard is range; headroom for what FP16 nodes compute is the
  range rule's job. BF16 has FP32's range: nothing is checked under bf16.
- Who moves to FP32: for a boundary Cast or a graph input, the FP16 consumers
  (the producer already is FP32, or is the user's input); for an FP16 node's
  own output (the range rule is off or set above 65504), that node. Only nodes
  whose precision came from the default are moved; a user rule or an author's
  choice is reported under `not_moved` (logged as a warning), never overridden.
- A consumer moved to FP32 hands its outputs to its own FP16 consumers: those
  above 65504 are moved in the same round (predicted from the network), then
  the plan is checked again, to a fixpoint or `MAX_ROUNDS` rounds (every
  round only moves nodes to FP32, so it terminates).
- Tolerated: a tensor read by an op that saturates (Tanh, Sigmoid, Erf: inf
  gives +-1, 0 or 1 as any value beyond 65504 does in FP32), and a tensor that
  overflows only towards -inf (its largest value fits:
  an additive attention mask of -1e9 or -3.4e38) read by Softmax (not LogSoftmax: -inf stays -inf).
  exp(-inf) is 0, as the reference's exp of the huge negative value is, so the
  consumer stays fp16 (keeping attention's Softmax FP32 would also break
  TensorRT's fused FP16 attention); listed under `tolerated`. A row masked
  entirely would differ (NaN): the emulated validation sees that on the samples.
- The plan is materialised only when the network shows a candidate (a tensor
  beyond 65504 with an fp16 producer or reader): most plans need none.
- Weights are the constants rule's (auto_constants.py): initializers have no
  reference-run value here.
- If/Loop/Scan bodies are checked like the main graph: the reference run
  carries body tensors out (auto_range.py), and the materialised bodies are
  walked with their boundary Casts (a body node is named as in the plan).
- The bottom of the range (underflow.py): a stored tensor whose flush to zero or
  subnormal rounding changes what its readers compute beyond the stated bound
  (zeros feeding Log or a divisor, the relative error of a tensor tiny
  throughout) is found on the same materialised plan and moved the same way,
  reaching back to the fp16 producers of a moved node's lossy inputs; the bounds
  are recorded under `underflow`, the lossy tensors' count under
  `tensors_below_range`. Nothing at this end is tolerated: a saturating reader
  or Softmax gives the same wrong answer for a 0 as for any other value.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.precision.auto.auto_range import Observed
from trtpipe.precision.network.decisions import FP16_MAX, MATERIALIZE_AS, Decision
from trtpipe.precision.auto.masked_additions import NEGATIVE_INF_SAFE, is_masked_addition
from trtpipe.precision.auto.underflow import lossy, readers_needing, record_bounds, spread_underflow
from trtpipe.precision.network.network import Network

log = logging.getLogger(__name__)

MAX_ROUNDS = 4
_MOVABLE_SOURCES = ("default",)
# Ops that saturate: +-inf gives exactly what any value beyond 65504 gives in FP32 (+-1, 0 or 1).
_SATURATING = frozenset({"Tanh", "Sigmoid", "Erf"})


@dataclass(frozen=True)
class StoredTensor:
    """An FP16 tensor of the materialised plan whose reference value exceeds FP16's range (or, with `underflow`,
    loses what its readers compute at the bottom of the range)."""

    tensor: str  # the reference (plan) tensor name
    max_abs: float
    kind: str  # "boundary" (a Cast to fp16), "graph input", "output" (of an fp16 node)
    nodes: tuple[str, ...]  # the plan nodes that keep it fp16: the ones to move
    underflow: str = ""  # why its fp16 storage loses too much at the bottom of the range (underflow.lossy)


def protect_stored_tensors(net: Network, decisions: dict[str, Decision], observed: Observed | None,
                           low_precision: str, keep_io_types: bool) -> dict:
    """Move to FP32 (in place) the nodes that make an out-of-range tensor FP16; returns the plan's record."""
    if low_precision != "fp16":
        return {"checked": False, "reason": f"{low_precision} has FP32's range: no stored tensor can overflow"
                if low_precision == "bf16" else "no low-precision default"}
    if observed is None:
        return {"checked": False, "reason": "no FP32 reference run (precision.auto.max_abs is null or there are "
                "no sample inputs): tensors stored in fp16 at precision boundaries were NOT checked "
                "against fp16's range"}
    record = {"checked": True, "threshold": FP16_MAX,
              "tensors_beyond_range": sum(1 for m in observed.tensors.values() if m > FP16_MAX),
              "underflow": record_bounds(),
              "tensors_below_range": sum(1 for t in observed.losses if lossy(t, observed.losses, observed.watch)),
              "materialisations": 0, "fp16_tensors_checked": 0, "verified": False,
              "kept_fp32": [], "not_moved": {}, "tolerated": {}}
    for _ in range(MAX_ROUNDS):
        if not _candidates(net, decisions, observed, record["tolerated"]):
            record["verified"] = True
            break
        stored, record["fp16_tensors_checked"] = _out_of_range_fp16_tensors(net, decisions, observed, keep_io_types)
        record["materialisations"] += 1
        changed = False
        for found in stored:
            for node in found.nodes:
                if decisions[node].precision == "fp32":
                    continue  # moved already, for another tensor of this round
                if not found.underflow and _tolerated(net, node, found, observed):
                    record["tolerated"][(node, found.tensor)] = _tolerated_entry(net, node, found, observed)
                elif decisions[node].source in _MOVABLE_SOURCES:
                    record["kept_fp32"] += _move(net, decisions, node, found, observed)
                    changed = True
                else:
                    record["not_moved"][(node, found.tensor)] = _not_moved(node, found, decisions[node])
        if not changed:
            record["verified"] = True
            break
    else:
        log.warning("stored-tensor check: nodes were still being moved to FP32 after %d materialisations; "
                    "the last plan is not verified", MAX_ROUNDS)
    record["not_moved"] = list(record["not_moved"].values())
    record["tolerated"] = list(record["tolerated"].values())
    return record


def _candidates(net: Network, decisions: dict[str, Decision], observed: Observed, tolerated: dict) -> list[str]:
    """Reference tensors beyond FP16's range that the plan may store in fp16: produced by an fp16 node, or
    read by one (or by an authored node). Decision: a cheap filter on the network first, so the plan is
    materialised only when some tensor could overflow (materialising converts every weight: seconds on a
    multi-GB model); the materialised graph then decides."""
    found = []
    for tensor, magnitude in observed.tensors.items():
        if magnitude <= FP16_MAX:
            continue
        producer = net.producer.get(tensor)
        if producer is not None and decisions[producer].precision == "fp16":
            if producer not in observed.saturating:
                found.append(tensor)
                continue
            # Its readers are its saturating chain's nodes and the Tanh/Sigmoid: each is tolerated below.
        kind = "boundary" if producer is not None else "graph input"
        for consumer in net.consumers.get(tensor, []):
            decision = decisions[consumer]
            if _reads_low(decision):
                probe = StoredTensor(tensor, magnitude, kind, (consumer,))
                if not _tolerated(net, consumer, probe, observed):
                    found.append(tensor)
                    break
                tolerated[(consumer, tensor)] = _tolerated_entry(net, consumer, probe, observed)
    for tensor in observed.losses:
        if not lossy(tensor, observed.losses, observed.watch):
            continue
        producer = net.producer.get(tensor)
        if (producer is not None and decisions[producer].precision == "fp16") or any(
                _reads_low(decisions[r]) for r in readers_needing(net, tensor, observed.losses, observed.watch)):
            found.append(tensor)
    return found


def _tolerated_entry(net: Network, node: str, found: StoredTensor, observed: Observed) -> dict:
    if node in observed.saturating:
        saturating = observed.saturating[node]
        return _entry(node, found, why=f"beyond {FP16_MAX:g} only where {net.op_type(saturating)} {saturating} "
                                       "saturates: +-inf gives the +-1 (or 0, 1) the reference gives, measured on "
                                       "the samples (saturating_chains.py)")
    if net.op_type(node) == "Add":
        return _entry(node, found, why=f"only values below -{FP16_MAX:g} overflow (to -inf); the Add keeps -inf and "
                                       "only Softmax reads it, which maps -inf to 0 as the reference's huge "
                                       "negative value gives (masked_additions.py)")
    if net.op_type(node) in _SATURATING:
        return _entry(node, found, why=f"{net.op_type(node)} saturates: +-inf gives what the reference's "
                                       f"values beyond {FP16_MAX:g} give")
    return _entry(node, found, why=f"only values below -{FP16_MAX:g} overflow (to -inf); {net.op_type(node)} maps "
                                   "-inf to what the reference's huge negative value gives")


def _tolerated(net: Network, node: str, found: StoredTensor, observed: Observed) -> bool:
    if is_masked_addition(net, node, observed.highest, FP16_MAX):
        return True  # an additive attention mask: -inf in, -inf out, 0 after Softmax (masked_additions.py)
    if node in observed.saturating:
        return True  # inf only where a Tanh/Sigmoid saturates anyway, measured (saturating_chains.py)
    if found.kind == "output" or net.nodes[node].input[0] != found.tensor:
        return False
    if net.op_type(node) in _SATURATING:
        return True
    return net.op_type(node) in NEGATIVE_INF_SAFE and observed.highest.get(found.tensor, 0.0) <= FP16_MAX


def _entry(node: str, found: StoredTensor, **extra) -> dict:
    if found.underflow:
        extra = {"underflow": found.underflow, **extra}
    return {"node": node, "tensor": found.tensor, "kind": found.kind, "max_abs": float(f"{found.max_abs:.6g}"),
            **extra}


def _move(net: Network, decisions: dict[str, Decision], node: str, found: StoredTensor,
          observed: Observed) -> list[dict]:
    """Move `node` to FP32, then (predicted) its FP16 consumers that would read an out-of-range Cast."""
    moved = []
    stack = [(node, found)]
    while stack:
        name, why = stack.pop()
        if decisions[name].source not in _MOVABLE_SOURCES or decisions[name].precision == "fp32":
            continue
        decisions[name] = Decision("fp32", _reason(why), "auto", why.max_abs)
        moved.append(_entry(name, why))
        if observed.watch is not None:  # the lossy inputs' fp16 producers, the lossy outputs' fp16 readers
            stack += [(other, StoredTensor(tensor, observed.tensors.get(tensor, 0.0), kind, (other,), reason))
                      for other, tensor, kind, reason in spread_underflow(net, decisions, name, observed.losses,
                                                                          observed.watch)]
        for output in net.float_outputs(name):
            magnitude = observed.tensors.get(output, 0.0)
            if magnitude <= FP16_MAX:
                continue
            for consumer in net.consumers.get(output, []):
                predicted = StoredTensor(output, magnitude, "boundary", (consumer,))
                if decisions[consumer].precision == "fp16" and not _tolerated(net, consumer, predicted, observed):
                    stack.append((consumer, predicted))
    return moved


def _reason(found: StoredTensor) -> str:
    if found.underflow:
        where = {"output": "output", "graph input": "graph input"}.get(found.kind, "input tensor")
        return (f"stored tensor (underflow): {where} {found.tensor} of this node: {found.underflow}; kept FP32 so "
                "it is not stored in fp16")
    value = f"{found.max_abs:.3g} in the reference, beyond FP16's {FP16_MAX:g}"
    if found.kind == "output":
        return f"stored tensor: output {found.tensor} of this node is {value}; kept FP32 so it is not stored in fp16"
    if found.kind == "graph input":
        return (f"boundary: graph input {found.tensor} of this node is {value}; kept FP32 so the input is not "
                "stored in fp16 (keep_io_types=false)")
    return f"boundary: input tensor {found.tensor} of this node is {value}; kept FP32 so it is not cast to fp16"


def _not_moved(node: str, found: StoredTensor, decision: Decision) -> dict:
    if found.underflow:
        log.warning("%s stays %s (%s) although its %s tensor %s loses too much in fp16: %s", node, decision.precision,
                    decision.reason, found.kind, found.tensor, found.underflow)
        return _entry(node, found, why=f"precision set by {decision.source}: {decision.reason}")
    log.warning("%s stays %s (%s) although its %s tensor %s is %.3g in the reference, beyond FP16's %g: it "
                "will be inf in fp16", node, decision.precision, decision.reason, found.kind, found.tensor,
                found.max_abs, FP16_MAX)
    return _entry(node, found, why=f"precision set by {decision.source}: {decision.reason}")


def _out_of_range_fp16_tensors(net: Network, decisions: dict[str, Decision], observed: Observed,
                               keep_io_types: bool) -> tuple[list[StoredTensor], int]:
    """The FP16 tensors of the materialised plan beyond FP16's range or losing too much below it (underflow.py),
    and how many FP16 tensors were checked."""
    from trtpipe.precision.materialize.materialize_reuse import materialize_remembered

    node_precision = {name: MATERIALIZE_AS[d.precision] for name, d in decisions.items()}
    mixed, _ = materialize_remembered(net, node_precision, keep_io_types)
    graphs = list(all_graphs(mixed.graph))
    nodes_of_all = [node for graph in graphs for node in graph.node]
    reference = _reference_names(net, mixed.graph, nodes_of_all)
    fp16 = [t for t, elem in _element_types(graphs, nodes_of_all).items()
            if elem == TensorProto.FLOAT16 and t in reference]
    producer = {out: node for node in nodes_of_all for out in node.output if out}
    consumers: dict[str, list[str]] = {}
    for node in nodes_of_all:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node.name)
    graph_inputs = {value.name for value in mixed.graph.input}
    found = []
    for tensor in fp16:
        magnitude = observed.tensors.get(reference[tensor], 0.0)
        underflow = "" if magnitude > FP16_MAX else lossy(reference[tensor], observed.losses, observed.watch)
        if magnitude <= FP16_MAX and not underflow:
            continue
        readers = consumers.get(tensor, [])
        if underflow:  # only the readers that need it: the singular ones and those computing their inputs
            needing = set(readers_needing(net, reference[tensor], observed.losses, observed.watch))
            readers = [r for r in readers if r in needing]
        node = producer.get(tensor)
        if node is None and tensor in graph_inputs:
            kind, nodes = "graph input", _plan_nodes(readers, net, decisions)
        elif node is not None and _is_original(node, net):
            if decisions[node.name].precision not in ("fp16",):
                continue  # an author's Cast or authored fp16: the reference computes it so too
            kind, nodes = "output", (node.name,)
        elif node is not None and node.op_type == "Cast":
            kind, nodes = "boundary", _plan_nodes(readers, net, decisions)
        else:
            continue
        if nodes:
            found.append(StoredTensor(reference[tensor], magnitude, kind, nodes, underflow))
    return found, len(fp16)


def _plan_nodes(names: list[str], net: Network, decisions: dict[str, Decision]) -> tuple[str, ...]:
    """The plan's fp16 (or authored) nodes among the materialised consumers (added Casts are not plan nodes)."""
    return tuple(dict.fromkeys(n for n in names if n in net.nodes and _reads_low(decisions[n])))


def _reads_low(decision: Decision) -> bool:
    return decision.precision == "fp16" or (decision.precision == "keep" and decision.source == "authored")


def _is_original(node: onnx.NodeProto, net: Network) -> bool:
    original = net.nodes.get(node.name)
    return original is not None and original.op_type == node.op_type


def _reference_names(net: Network, graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> dict[str, str]:
    """Materialised tensor -> the reference tensor holding its value (before rounding); `nodes` are every
    graph's, outer graphs first (a body's Cast reads a tensor mapped before it)."""
    reference = {value.name: value.name for value in graph.input}
    for node in nodes:
        if _is_original(node, net):
            for materialised, original in zip(node.output, net.nodes[node.name].output):
                if materialised:
                    reference[materialised] = original
        elif node.op_type == "Cast" and node.input and node.input[0] in reference:
            reference[node.output[0]] = reference[node.input[0]]
    return reference


def _element_types(graphs: list[onnx.GraphProto], nodes: list[onnx.NodeProto]) -> dict[str, int]:
    types = {}
    for graph in graphs:
        for value in [*graph.input, *graph.value_info, *graph.output]:
            if value.type.HasField("tensor_type"):
                types[value.name] = value.type.tensor_type.elem_type
    for node in nodes:
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to is not None and node.output:
                types[node.output[0]] = to
    return types
