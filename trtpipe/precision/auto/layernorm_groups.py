"""Decomposed LayerNorm as other exporters write it, found by its math.

A LayerNorm is `(x - E[x]) / sqrt(Var[x] + eps) * gamma + beta`; exporters write
the variance and the output in several ways:

| variance form      | math                         | written by                                   |
|--------------------|------------------------------|----------------------------------------------|
| centred square     | E[(x - E[x])^2]              | torch (Pow), Paddle2ONNX, tf2onnx's Keras `moments` (SquaredDifference -> Sub, Mul(d, d)) |
| moment difference  | E[x^2] - E[x]^2              | jax2tf/flax (magika), hand-written exports   |

where `E[t]` is `ReduceMean(t)` or `ReduceSum(t)` times/divided by a constant
(keepdims=0 then `Reshape`/`Expand` back, as jax2tf writes it), and a square is
`Pow(t, 2)` or `Mul(t, t)`. After the variance, any mix of `Add(eps)`, `Sqrt`,
`Reciprocal`/`Div` (tf2onnx's Rsqrt), `Max(0, .)`, gamma folded into 1/std,
`Sub(x, mean) * inv` or Keras' `x * inv + (beta - mean * inv)`.

The variance forms are a small table (`VARIANCE_FORMS`); everything after the
variance is found by one closure over tensor roles rather than per-exporter
chains:

- roles: `x` and tensors computed elementwise from x and E[x] only are `input`;
  reductions of x and what is computed from them alone are `mean` or, once the
  variance is involved, `scale`; a tensor combining `input` with `scale` is
  `normalised`.
- a consumer joins the group when it is elementwise (or a Reshape/Expand/
  Squeeze/Unsqueeze/Identity), every float input it has is a constant or
  already in the group, and the roles it combines are ones a LayerNorm
  combines (input+mean, input+scale, normalised+scale, statistics alone).
  `normalised` with constants only is the affine part: at most two such steps
  (gamma, beta), so an activation after the norm is not pulled in.

Decision: E[x^2] - E[x]^2 is catastrophic cancellation in FP16 when |E[x]| is
large against the spread (magika: cosine 0.016 when run in FP16), so the whole
group, statistics included, is kept FP32 as one unit.
Decision: a group counts only if it reaches a `Sqrt` of the scale and a
`normalised` tensor; a variance that feeds something else is not a LayerNorm.

Two more forms (issue 21):
- tf2onnx's `GlobalAveragePool`: its GlobalPoolOptimizer turns a ReduceMean over
  axes [2, rank) into a GlobalAveragePool (a Keras LayerNormalization of [B, T, C],
  or an instance norm's spatial mean of NCHW), so `E[t]` is a GlobalAveragePool too.
- the unbiased std, `gamma * (x - mean) / (std + eps) + beta` with
  `std = x.std(-1)` (torch's default, Bessel-corrected): torch exports the std's
  own mean as a second ReduceMean of x next to the user's `x.mean(-1)`
  (`sibling` means: the same reduction of the same x, role `mean`), scales the
  variance by N / (N - 1) (constants, role `scale`) and adds eps to the std. gamma
  may scale the centred tensor before the division: a `centred` tensor times a
  constant stays `centred` (once), and a `centred` (or sibling-mean) tensor the
  group does not end up normalising is dropped again. The label says what
  differs from a LayerNorm (`_std_form`): eps added to the std is not
  `LayerNormalization` (the fusion never matches it), so it is grouped, not fused.
"""

from __future__ import annotations

import heapq

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.network.network import Network

ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Reciprocal", "Sqrt", "Max", "Relu", "Neg"}
PASSTHROUGH = {"Reshape", "Expand", "Squeeze", "Unsqueeze", "Identity"}
MEAN_OPS = {"ReduceMean", "GlobalAveragePool"}  # GlobalAveragePool: tf2onnx's mean over [2, rank)
AFFINE_STEPS = 2  # gamma, then beta

INPUT, CENTRED, MEAN, SCALE, NORMALISED = "input", "centred", "mean", "scale", "normalised"


# --- E[t], t², and the variance forms ------------------------------------------------------


def _through(net: Network, tensor: str) -> tuple[str, list[str]]:
    """Walk back over shape-only ops (Reshape/Expand/...); returns (source tensor, their nodes)."""
    nodes = []
    while (producer := net.producer.get(tensor)) and net.op_type(producer) in PASSTHROUGH:
        nodes.append(producer)
        tensor = net.nodes[producer].input[0]
    return tensor, nodes


def mean_of(net: Network, tensor: str) -> tuple[str, list[str]] | None:
    """`tensor` = E[t]: ReduceMean(t) or GlobalAveragePool(t), or ReduceSum(t) times / divided by a
    constant. (t, nodes)."""
    tensor, nodes = _through(net, tensor)
    producer = net.producer.get(tensor)
    if producer is None:
        return None
    node = net.nodes[producer]
    if node.op_type in MEAN_OPS:
        return node.input[0], nodes + [producer]
    if node.op_type in ("Mul", "Div") and len(node.input) == 2:
        operands = node.input if node.op_type == "Mul" else node.input[:1]
        for operand in operands:
            other = node.input[1] if operand == node.input[0] else node.input[0]
            summed = net.producer.get(operand)
            if other in net.constants and summed and net.op_type(summed) == "ReduceSum":
                return net.nodes[summed].input[0], nodes + [producer, summed]
    return None


def square_of(net: Network, tensor: str) -> tuple[str, list[str]] | None:
    """`tensor` = t²: Pow(t, 2) or Mul(t, t). (t, nodes)."""
    tensor, nodes = _through(net, tensor)
    producer = net.producer.get(tensor)
    if producer is None:
        return None
    node = net.nodes[producer]
    if node.op_type == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]:
        return node.input[0], nodes + [producer]
    if node.op_type == "Pow" and len(node.input) == 2 and node.input[1] in net.constants:
        exponent = tensor_array(net.constants[node.input[1]])
        if exponent.size == 1 and float(exponent.ravel()[0]) == 2.0:
            return node.input[0], nodes + [producer]
    return None


@dataclass
class Statistics:
    x: str
    mean_nodes: list[str]  # compute E[x] (and reshape it back)
    variance_nodes: list[str]  # compute the variance; the last one is the anchor
    centred: str | None = None  # x - E[x] when the variance form computes it


def centred_square(net: Network, variance: str) -> Statistics | None:
    """E[(x - E[x])²]."""
    node = net.nodes[variance]
    found = mean_of(net, node.output[0])
    squared = found and square_of(net, found[0])
    centre = squared and net.producer.get(squared[0])
    if not centre or net.op_type(centre) != "Sub":
        return None
    x, mean_tensor = net.nodes[centre].input[:2]
    mean = mean_of(net, mean_tensor)
    if mean is None or mean[0] != x:
        return None
    return Statistics(x, mean[1], found[1] + squared[1] + [centre], net.nodes[centre].output[0])


def moment_difference(net: Network, variance: str) -> Statistics | None:
    """E[x²] - E[x]²."""
    node = net.nodes[variance]
    if node.op_type != "Sub" or len(node.input) != 2:
        return None
    second = mean_of(net, node.input[0])
    squared_x = second and square_of(net, second[0])
    squared_mean = square_of(net, node.input[1])
    mean = squared_mean and mean_of(net, squared_mean[0])
    if not (squared_x and mean) or squared_x[0] != mean[0]:
        return None
    return Statistics(mean[0], mean[1], second[1] + squared_x[1] + squared_mean[1] + [variance])


VARIANCE_FORMS: dict[str, Callable[[Network, str], Statistics | None]] = {
    "centred square": centred_square,
    "moment difference": moment_difference,
}


# --- the group around the statistics -------------------------------------------------------


def layernorm_group(net: Network, anchor: str) -> tuple[list[str], str] | None:
    """If `anchor` computes a LayerNorm variance: (every node of that LayerNorm, form name)."""
    if net.op_type(anchor) in PASSTHROUGH:
        return None
    for form, statistics in VARIANCE_FORMS.items():
        found = statistics(net, anchor)
        members = found and _close(net, found, anchor)
        if members:
            return members, form + _std_form(net, found, anchor, members)
    return None


def _close(net: Network, found: Statistics, variance: str) -> list[str]:
    roles = {found.x: INPUT}
    affine: dict[str, int] = {}  # normalised tensor -> affine steps already taken
    for name in found.mean_nodes:
        roles[net.nodes[name].output[0]] = MEAN
    siblings = _sibling_means(net, found)
    for name in siblings:
        roles[net.nodes[name].output[0]] = MEAN
    if found.centred:
        roles[found.centred] = CENTRED
    roles[net.nodes[variance].output[0]] = SCALE
    statistics = found.mean_nodes + found.variance_nodes
    members = dict.fromkeys(statistics)
    # Decision: walk forward from the statistics through the consumers, in topological order (a
    # consumer is judged after everything it reads), not over every node of the network: one scan
    # per LayerNorm made grouping quadratic (2.3 s for a 96-layer encoder).
    frontier = [(net.position[c], c) for t in roles for c in net.consumers.get(t, ())]
    heapq.heapify(frontier)
    visited: set[str] = set()
    while frontier:
        _, name = heapq.heappop(frontier)
        if name in visited or name in members or not _candidate(net, name, roles):
            continue
        visited.add(name)
        role, steps = _role(net, name, roles, affine)
        if role is None:
            continue
        members[name] = None
        output = net.nodes[name].output[0]
        roles[output] = role
        if role in (NORMALISED, CENTRED):
            affine[output] = steps
        for consumer in net.consumers.get(output, ()):
            heapq.heappush(frontier, (net.position[consumer], consumer))
    has_sqrt = any(net.op_type(n) == "Sqrt" for n in members)
    if not (has_sqrt and NORMALISED in roles.values()):
        return []
    return _without_loose_ends(net, list(members), set(statistics), roles, siblings)


def _sibling_means(net: Network, found: Statistics) -> list[str]:
    """Other reductions of x identical to the statistics' E[x] (op, axes, attributes): torch's
    `x.std(-1)` computes its own mean next to the user's `x.mean(-1)`."""
    mean = next((n for n in reversed(found.mean_nodes) if net.op_type(n) in MEAN_OPS), None)
    if mean is None:
        return []
    like = net.nodes[mean]
    return [c for c in net.consumers.get(found.x, ()) if c not in found.mean_nodes and c in net.nodes
            and _same_reduction(net, net.nodes[c], like)]


def _same_reduction(net: Network, node, like) -> bool:
    if node.op_type != like.op_type or len(node.input) != len(like.input) or node.input[0] != like.input[0]:
        return False
    for mine, theirs in zip(node.input[1:], like.input[1:]):  # ReduceMean's axes input (opset 18)
        if mine != theirs and not (mine in net.constants and theirs in net.constants and
                                   tensor_array(net.constants[mine]).tolist()
                                   == tensor_array(net.constants[theirs]).tolist()):
            return False
    return _attributes(node) == _attributes(like)


def _attributes(node) -> list[bytes]:
    return sorted(attribute.SerializeToString() for attribute in node.attribute)


def _without_loose_ends(net: Network, members: list[str], statistics: set[str], roles: dict[str, str],
                        siblings: list[str]) -> list[str]:
    """Drop walked `centred`/`mean` nodes nothing in the group reads (x - E[x] used elsewhere, a
    sibling mean's own centring); add the sibling means the group does read."""
    kept = set(members)
    changed = True
    while changed:
        changed = False
        for name in list(kept - statistics):
            output = net.nodes[name].output[0]
            if roles.get(output) in (CENTRED, MEAN) and not any(c in kept for c in net.consumers.get(output, ())):
                kept.discard(name)
                changed = True
    read = {t for name in kept for t in net.nodes[name].input}
    used_siblings = [name for name in siblings if net.nodes[name].output[0] in read]
    return used_siblings + [name for name in members if name in kept]


def _std_form(net: Network, found: Statistics, variance: str, members: list[str]) -> str:
    """What this group's std is, where it is not LayerNormalization's sqrt(Var + eps): the variance
    scaled by a constant before the Sqrt (N / (N - 1): the unbiased std), eps added to the std."""
    inside = set(members)
    factor, tensor = 1.0, net.nodes[variance].output[0]
    sqrt = None
    while True:
        users = [c for c in net.consumers.get(tensor, ()) if c in inside]
        if len(users) != 1:
            break
        node = net.nodes[users[0]]
        if node.op_type == "Sqrt":
            sqrt = node
            break
        other = [t for t in node.input if t != tensor]
        value = tensor_array(net.constants[other[0]]) if len(other) == 1 and other[0] in net.constants else None
        if value is None or value.size != 1:
            break
        if node.op_type == "Mul":
            factor *= float(value.ravel()[0])
        elif node.op_type == "Div" and node.input[0] == tensor:
            factor /= float(value.ravel()[0])
        elif node.op_type != "Add":  # + eps inside the Sqrt, as LayerNormalization has it
            break
        tensor = node.output[0]
    parts = []
    count = _reduced_count(net, found)
    if count and count > 1 and np.isclose(factor, count / (count - 1), rtol=1e-6):
        parts.append(f"unbiased std: variance x N/(N-1), N={count}")
    elif not np.isclose(factor, 1.0, rtol=1e-6):
        parts.append(f"variance x {factor:.6g}")
    if sqrt is not None and any(net.op_type(c) == "Add" and c in inside for c in net.consumers.get(sqrt.output[0], ())):
        parts.append("eps added to the std")
    return "".join(f", {part}" for part in parts) + (": not LayerNormalization" if parts else "")


def _reduced_count(net: Network, found: Statistics) -> int | None:
    """N, the number of elements each mean averages: |x| / |E[x]| from static shapes, else None."""
    mean = next((n for n in reversed(found.mean_nodes) if net.op_type(n) in MEAN_OPS), None)
    shapes = [net.tensor_shapes.get(t) for t in (found.x, mean and net.nodes[mean].output[0])]
    if any(shape is None or not all(isinstance(d, int) and d > 0 for d in shape) for shape in shapes):
        return None
    return int(np.prod(shapes[0])) // max(1, int(np.prod(shapes[1])))


def _candidate(net: Network, name: str, roles: dict[str, str]) -> bool:
    node = net.nodes[name]
    if node.op_type not in ELEMENTWISE | PASSTHROUGH or len(node.output) != 1:
        return False
    if node.op_type in PASSTHROUGH:
        return node.input[0] in roles
    floats = [t for t in node.input if t and (net.is_float(t) or t in roles)]
    return any(t in roles for t in floats) and all(t in roles or t in net.constants for t in floats)


def _role(net: Network, name: str, roles: dict[str, str], affine: dict[str, int]) -> tuple[str | None, int]:
    """The role of the node's output, or None when a LayerNorm never combines these roles."""
    node = net.nodes[name]
    if node.op_type in PASSTHROUGH:
        role = roles[node.input[0]]  # a reshape of the output is the consumer's business
        return (None, 0) if role == NORMALISED else (role, 0)
    seen = [roles[t] for t in node.input if t in roles]
    kinds = set(seen)
    if seen.count(INPUT) + seen.count(CENTRED) + seen.count(NORMALISED) > 1 or kinds == {INPUT}:
        return None, 0  # x * x is the variance's business; x alone with a constant is not the norm
    if kinds <= {MEAN}:
        return MEAN, 0
    if kinds <= {MEAN, SCALE}:
        return SCALE, 0
    if kinds == {INPUT, MEAN}:
        return CENTRED, 0
    if kinds == {CENTRED}:  # gamma * (x - E[x]) before the division by the std, once
        scaled = any(affine.get(t, 0) for t in node.input if roles.get(t) == CENTRED)
        return (CENTRED, 1) if node.op_type in ("Mul", "Div") and not scaled else (None, 0)
    if kinds in ({INPUT, SCALE}, {CENTRED, SCALE}, {NORMALISED, SCALE}):
        return NORMALISED, 0
    if kinds == {NORMALISED}:
        steps = 1 + max(affine.get(t, 0) for t in node.input if roles.get(t) == NORMALISED)
        ok = steps <= AFFINE_STEPS and node.op_type in ("Mul", "Add", "Sub", "Div")
        return (NORMALISED, steps) if ok else (None, 0)
    return None, 0
