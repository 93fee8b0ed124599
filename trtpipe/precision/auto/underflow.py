"""The bottom of FP16's range: which stored tensors lose what their readers compute.

FP16's smallest subnormal is 2^-24 (6.0e-8) and its smallest normal 2^-14 (6.1e-5).
A value below 2^-25 is stored as 0; a value between the two keeps only a fixed
absolute step of 6.0e-8, so its relative error grows as it shrinks (a 1e-6 value
is stored with ~3% error). The stored-tensor check (auto_boundaries.py) judges
the top of the range with the reference run's maxima; this module gives it the
bottom, from the same run (auto_range.observe_reference records `StorageLoss`).

Two hazards, each with a stated bound (`LOSS_LIMIT` = auto_constants.EFFECT_LIMIT,
1e-3, twice FP16's own rounding of a normal value, 2^-11 = 4.9e-4 relative):

- a **singular reader**: `Log` (input 0), `Div` (the divisor), `Reciprocal`, `Pow`
  with a negative constant exponent (the base), and `Sqrt` whose output is such a
  divisor/base (`Sqrt` then `Div`). A zero where the reference is non-zero gives
  inf/NaN there: any flushed value of the tensor it reads counts. These readers
  also need every element's *relative* precision (the log of a value stored with
  30% error is off by 0.26, whatever the value's size), so the tensor they read,
  and the tensors it is computed from element by element (walking up through
  elementwise and data-movement ops; a reduction, a Conv or a MatMul ends the
  walk), are judged by the change FP16 storage makes to what the reader computes
  from each element: the relative L2 change of log|v| (Log), 1/|v| (a divisor,
  Reciprocal), |v|^-p (Pow) or 1/sqrt|v| (Sqrt then a divisor), against
  `LOSS_LIMIT`. Decision: the reader's own function, not a plain relative error,
  because it weighs the elements as the reader's output does (1/v is dominated by
  the smallest values, exactly those the subnormals round worst); an elementwise
  chain carries each element's relative error to the reader's input, so the
  same function judges the tensors up the region. A normal-range tensor stays
  below the bound (2^-11 per element at most); a spectrum mostly below 6e-8 does not;
- a tensor **tiny throughout** (any reader): its values sit so deep in the
  subnormals that storing it in FP16 changes it by `LOSS_LIMIT` or more in relative
  L2 norm (what a MatMul or a sum reading it inherits). Screened for every tensor
  with one norm: ||fp16(v) - v|| <= sqrt(n)*2^-25 + 2^-11*||v||, so only tensors
  whose RMS is below ~3e-5 are rounded to measure it.

Decisions:
- Measured on the FP32 reference run's values (every sample input), If/Loop/Scan
  bodies included: the reference run carries every body tensor out (auto_range.py),
  a Loop/Scan body tensor holding all its iterations. Decision: judged over all
  iterations at once, as the range rule judges them (one plan serves every
  iteration, so a flush in any one counts); an If branch the samples did not take
  has an empty value and is not judged. A singular reader inside a body is one
  like any other, its input region walked up across the body's boundary (a body
  node reading an outer-scope tensor); body graph inputs (a Loop's carried state,
  a Scan's slice) have no producer and end the walk.
- What moves to FP32 (auto_boundaries.py): the smallest region that removes the
  loss. The readers that need the tensor (the singular reader; every reader of a
  tensor tiny throughout) and, when the tensor is an fp16 node's output, that
  node; then, "reaching back", the fp16 producer of every input of a moved node
  that is itself lossy (a Log kept FP32 still reads a power spectrum rounded to
  FP16 if the Mul computing it stays FP16). A heavy producer (the framing Conv)
  moves when its own output is lossy; its inputs are judged like any other.
- Values overflowing FP16 are the range rule's: the loss here counts finite
  stored values only, and the norms are taken over them (a mask of -inf or +inf
  among tiny values would make every norm inf and hide the tiny values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.auto.auto_constants import EFFECT_LIMIT, FLUSH_THRESHOLD
from trtpipe.precision.network.decisions import FP16_MAX, FP16_MIN_NORMAL
from trtpipe.precision.network.network import Network
from trtpipe.precision.network.passthrough import PASSTHROUGH_OPS, passthrough_views

LOSS_LIMIT = EFFECT_LIMIT
_ROUNDING = 2.0**-11  # FP16's largest relative rounding error of a normal value
_SUBNORMAL_STEP = FLUSH_THRESHOLD  # the largest absolute rounding error below 2^-14 (half a step of 2^-24)
_DIVISORS = {"Div": 1, "Reciprocal": 0}
# Ops that compute each output element from the same element of their inputs (or move elements): the
# per-element relative error of their inputs is that of their output. A reduction averages it away.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Abs", "Neg", "Exp", "Relu", "Max", "Min",
                          "Clip", "Sum", "Mean", "Split", "Slice", "Concat", "Gather", "Where"}) | PASSTHROUGH_OPS


@dataclass
class StorageLoss:
    """What FP16 storage does to one reference tensor, the worst over the sample inputs."""

    flushed: int = 0  # non-zero values that become 0
    storage_error: float = 0.0  # ||fp16(v) - v|| / ||v||
    element_error: float = 0.0  # relative L2 change of the singular reader's function of it (watched tensors only)

    def merge(self, other: "StorageLoss") -> "StorageLoss":
        return StorageLoss(max(self.flushed, other.flushed), max(self.storage_error, other.storage_error),
                           max(self.element_error, other.element_error))


@dataclass
class UnderflowWatch:
    """The singular readers of each tensor and the tensors whose per-element precision they need."""

    singular: dict[str, list[tuple[str, str]]]  # tensor -> [(reader node, what it computes)]
    sensitive: dict[str, tuple[str, str]]  # tensor -> the singular reader whose input it computes, and what it is
    functions: dict[str, str]  # tensor -> the reader's function of each element: log, inverse, rsqrt, power:<p>


def singular_slot(net: Network, name: str, index: int) -> str | None:
    """What node `name` computes from a 0 in its input `index` (None: nothing singular)."""
    op = net.op_type(name)
    if op == "Log" and index == 0:
        return "Log (log 0 = -inf)"
    if _DIVISORS.get(op) == index:
        return f"{op} (the divisor: x/0 = inf)"
    if op == "Pow" and index == 0 and _negative_exponent(net, net.nodes[name]):
        return "Pow with a negative exponent (0^-p = inf)"
    if op == "Sqrt" and index == 0:
        readers = [singular_slot(net, reader, list(net.nodes[reader].input).index(view))
                   for view in passthrough_views(net, net.nodes[name].output[0])
                   for reader in net.consumers.get(view, []) if net.op_type(reader) != "Sqrt"]
        found = next((r for r in readers if r), None)
        return f"Sqrt then {found}" if found else None
    return None


def guarded_readers(net: Network, name: str) -> list[tuple[str, str]]:
    """(node, what) for the singular readers of node `name`'s outputs, the data-movement nodes between, and
    the divisors reading a Sqrt among them: the region an epsilon added by `name` guards (auto_constants.py)."""
    found: list[tuple[str, str]] = []
    for output in (o for o in net.nodes[name].output if o):
        views = passthrough_views(net, output)
        movers = [(net.producer[v], "moves the guarded values") for v in views if v != output and v in net.producer]
        readers = [(reader, singular_slot(net, reader, index)) for view in views
                   for reader in net.consumers.get(view, [])
                   for index, tensor in enumerate(net.nodes[reader].input) if tensor == view]
        readers = [(reader, what) for reader, what in readers if what]
        found += (movers if readers else []) + readers
        found += [deeper for reader, _ in readers if net.op_type(reader) == "Sqrt"
                  for deeper in guarded_readers(net, reader)]
    return list(dict.fromkeys(found))


def underflow_watch(net: Network) -> UnderflowWatch:
    """Structural: the singular readers (bodies included) and the region their inputs are computed in."""
    singular: dict[str, list[tuple[str, str]]] = {}
    for name in net.names:
        for index, tensor in enumerate(net.nodes[name].input):
            if tensor and tensor not in net.constants and net.is_float(tensor):
                what = singular_slot(net, name, index)
                if what:
                    singular.setdefault(tensor, []).append((name, what))
    sensitive: dict[str, tuple[str, str]] = {}
    functions: dict[str, str] = {}
    for tensor, readers in singular.items():
        function = _function(net, readers[0][0])
        stack = [tensor]
        while stack:
            current = stack.pop()
            if current in sensitive:
                continue
            sensitive[current] = readers[0]
            functions[current] = function
            producer = net.producer.get(current)
            if producer is None or net.op_type(producer) not in _ELEMENTWISE:
                continue
            stack += [t for t in net.nodes[producer].input
                      if t and t not in net.constants and net.is_float(t) and t not in sensitive]
    return UnderflowWatch(singular, sensitive, functions)


def storage_loss(array: np.ndarray, function: str | None) -> StorageLoss | None:
    """The loss of storing `array` in FP16; None when it cannot reach `LOSS_LIMIT` (cheap screen first)."""
    values = np.asarray(array)
    if values.size == 0 or values.dtype not in (np.float16, np.float32, np.float64):
        return None
    values = values.ravel()
    if values.dtype == np.float16:
        return None  # already FP16: storing it again changes nothing
    with np.errstate(over="ignore"):  # a tensor beyond FP32's square root: inf, skipped (the range rule's)
        norm = float(np.linalg.norm(values))
        if not math.isfinite(norm):  # over the finite values only: an inf mask does not hide the tiny values
            values = values[np.isfinite(values)]
            norm = float(np.linalg.norm(values)) if values.size else 0.0
    if not math.isfinite(norm) or norm == 0.0:
        return None
    if function is None and math.sqrt(values.size) * _SUBNORMAL_STEP / norm + _ROUNDING < LOSS_LIMIT:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        stored = values.astype(np.float16).astype(values.dtype)
        error = np.where(np.abs(values) <= FP16_MAX, stored - values, 0)  # overflow is the range rule's
    error = np.nan_to_num(error, nan=0.0, posinf=0.0, neginf=0.0)
    nonzero = values != 0
    loss = StorageLoss(int(np.count_nonzero(nonzero & (stored == 0))), float(np.linalg.norm(error)) / norm)
    if function is not None and nonzero.any():
        loss.element_error = _function_change(function, values[nonzero], stored[nonzero])
    if loss.flushed or loss.storage_error >= LOSS_LIMIT or loss.element_error >= LOSS_LIMIT:
        return loss
    return None


def lossy(tensor: str, losses: dict[str, StorageLoss], watch: UnderflowWatch | None) -> str:
    """Why storing `tensor` in FP16 changes what its readers compute ('' when it does not)."""
    loss = losses.get(tensor)
    if loss is None or watch is None:
        return ""
    if loss.flushed and tensor in watch.singular:
        reader, what = watch.singular[tensor][0]
        return (f"{loss.flushed} value(s) non-zero in the reference flush to 0 in fp16 (below "
                f"{FLUSH_THRESHOLD:.2g}), read by {reader}: {what}")
    if loss.element_error >= LOSS_LIMIT and tensor in watch.sensitive:
        reader, what = watch.sensitive[tensor]
        change = f"{loss.element_error:.3g}" if math.isfinite(loss.element_error) else "inf"
        return (f"fp16's subnormals (below {FP16_MIN_NORMAL:.2g}) change what {reader} computes from each element "
                f"({what}; {watch.functions[tensor]} of the values) by {change} (relative L2) >= {LOSS_LIMIT:g}")
    if loss.storage_error >= LOSS_LIMIT:
        return (f"tiny throughout: fp16's subnormals (below {FP16_MIN_NORMAL:.2g}) change it by {loss.storage_error:.3g} "
                f"(relative L2) >= {LOSS_LIMIT:g}")
    return ""


def readers_needing(net: Network, tensor: str, losses: dict[str, StorageLoss], watch: UnderflowWatch) -> list[str]:
    """The readers of lossy `tensor` that must read it in FP32: every reader of a tensor tiny throughout,
    else the singular readers and the readers computing the singular readers' inputs."""
    readers = net.consumers.get(tensor, [])
    loss = losses.get(tensor)
    if loss is not None and loss.storage_error >= LOSS_LIMIT:
        return list(readers)
    singular = {reader for reader, _ in watch.singular.get(tensor, [])}
    return [r for r in readers if r in singular or any(o in watch.sensitive for o in net.nodes[r].output if o)]


def spread_underflow(net: Network, decisions: dict, name: str, losses: dict[str, StorageLoss],
                     watch: UnderflowWatch) -> list[tuple[str, str, str, str]]:
    """After `name` moved to FP32: (node, tensor, kind, why) for the fp16 nodes that must follow it.

    Reaching back: the fp16 producer of each lossy input (walking on through producers already FP32,
    which read their own inputs as stored); forward: the fp16 readers that need a lossy output."""
    found = []
    stack, seen = [name], {name}
    while stack:
        current = stack.pop()
        for tensor in net.nodes[current].input:
            why = lossy(tensor, losses, watch) if tensor and tensor not in net.constants else ""
            producer = net.producer.get(tensor)
            if not why or producer is None or producer in seen:
                continue
            seen.add(producer)
            if decisions[producer].precision == "fp16":
                found.append((producer, tensor, "output", why))
            elif decisions[producer].precision == "fp32":
                stack.append(producer)
    for output in net.float_outputs(name):
        why = lossy(output, losses, watch)
        if why:
            found += [(reader, output, "boundary", why) for reader in readers_needing(net, output, losses, watch)
                      if decisions[reader].precision == "fp16"]
    return found


def record_bounds() -> dict:
    """The plan's statement of the bounds used (`boundaries.underflow`)."""
    return {"flushes_below": FLUSH_THRESHOLD, "subnormal_below": FP16_MIN_NORMAL, "limit": LOSS_LIMIT,
            "singular_readers": ["Log", "Div (divisor)", "Reciprocal", "Pow (negative exponent)",
                                 "Sqrt then a divisor"]}


def _function(net: Network, reader: str) -> str:
    op = net.op_type(reader)
    if op == "Log":
        return "log"
    if op == "Pow":
        exponent = np.asarray(tensor_array(net.constants[net.nodes[reader].input[1]]), dtype=np.float64)
        return f"power:{float(exponent.min()):g}"
    return "rsqrt" if op == "Sqrt" else "inverse"


def _function_change(function: str, values: np.ndarray, stored: np.ndarray) -> float:
    """Relative L2 change of the reader's function of |values| when they are stored as `stored`; inf when the
    stored values give inf/NaN where the reference is finite (a flushed zero)."""
    exponent = {"log": None, "inverse": -1.0, "rsqrt": -0.5}.get(function)
    if function.startswith("power:"):
        exponent = float(function.split(":", 1)[1])
    magnitudes, rounded = np.abs(values.astype(np.float64)), np.abs(stored.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reference = np.log(magnitudes) if exponent is None else magnitudes**exponent
        candidate = np.log(rounded) if exponent is None else rounded**exponent
    finite = np.isfinite(reference)
    if not np.isfinite(candidate[finite]).all():
        return math.inf
    scale = float(np.linalg.norm(reference[finite]))
    change = float(np.linalg.norm(candidate[finite] - reference[finite]))
    return change / scale if scale > 0 else float(change > 0)


def _negative_exponent(net: Network, node) -> bool:
    if len(node.input) < 2 or node.input[1] not in net.constants:
        return False
    exponent = np.asarray(tensor_array(net.constants[node.input[1]]), dtype=np.float64)
    return bool(exponent.size) and bool((exponent < 0).any())
