"""Elementwise arithmetic whose large values only drive a Tanh or Sigmoid into saturation.

The tanh GELU `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` computes x^3, which
leaves FP16's range where |x| > 40 (T5 v1.1, GPT-2 and BERT-style FFNs with large
gates), and the range rule kept its Pow/Mul/Add/Mul FP32 (16 nodes and 8 Casts on a
4-block T5 encoder; the search keeps them FP16 and passes). But wherever x^3 is large
the Tanh is saturated: in FP16 the chain gives +-inf there, Tanh(+-inf) = +-1, which is
exactly what FP16 makes of the reference's Tanh of the huge finite value.

Rule (measured, not assumed): a chain is the maximal set of elementwise nodes (`CHAIN_OPS`)
upstream of a Tanh/Sigmoid `S` whose outputs only that set or `S` read (none a graph
output, none in a body). On every sample input the chain is evaluated as FP16 nodes
compute it (inputs and constants rounded to FP16, each op in FP32, its output rounded to
FP16: inf beyond 65504) from the FP32 reference values, and `S` applied. Wherever an
FP16 chain value is inf/NaN or a reference chain value exceeds the range limit, the FP16
result of `S` must equal the reference's `S` output rounded to FP16, bit for bit, and no
NaN may appear. A chain that passes on every sample keeps its nodes in low precision
despite their range (planner.py), and the stored-tensor check tolerates their
out-of-range outputs (auto_boundaries.py); each node's reason says so.

Decisions:
- Only Tanh and Sigmoid (NumPy computes both; Erf's GELU has no cube), only when every
  chain tensor has `S`'s shape (elements correspond one to one).
- The values are checked while the reference runs (auto_range.observe_reference's
  `inspect`), one sample at a time: no chain tensor is kept in memory.
- Elements inside the range are not judged here: their error is FP16's ordinary rounding,
  which validation judges like everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtpipe.onnxmodel.weights_on_disk import tensor_array
from trtpipe.precision.network.network import Network

SATURATING_OPS = {"Tanh": np.tanh, "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
CHAIN_OPS = {"Pow": np.power, "Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide,
             "Neg": np.negative}
REASON = "range tolerated: beyond the limit only where {op} {saturating} saturates (saturating_chains.py)"


@dataclass
class Chain:
    saturating: str  # the Tanh/Sigmoid node
    nodes: list[str]  # chain nodes in network order
    passed: bool = True  # on every sample so far
    checked: int = 0  # samples checked
    why: str = ""  # why it failed, if it did


@dataclass
class SaturatingChains:
    chains: list[Chain] = field(default_factory=list)
    limit: float = 65504.0

    def inspect(self, net: Network, values: dict) -> None:
        """One sample input's reference values (auto_range.observe_reference calls this per sample)."""
        for chain in self.chains:
            if chain.passed:
                why = _check(net, chain, values, self.limit)
                chain.checked += 1
                if why:
                    chain.passed, chain.why = False, why

    def tolerated(self) -> dict[str, str]:
        """chain node -> its Tanh/Sigmoid, for the chains that passed on at least one sample."""
        return {name: chain.saturating for chain in self.chains if chain.passed and chain.checked
                for name in chain.nodes}


def find_chains(net: Network, limit: float) -> SaturatingChains:
    """The chains of the network (module docstring), before any value is seen."""
    outputs = {value.name for value in net.model.graph.output}
    found = SaturatingChains(limit=limit)
    for name in net.names:
        node = net.nodes[name]
        if node.op_type not in SATURATING_OPS or name in net.parent or not node.input:
            continue
        region: set[str] = set()
        frontier = [net.producer.get(node.input[0])]
        while frontier:
            candidate = frontier.pop()
            if candidate is None or candidate in region or not _chain_node(net, candidate, outputs):
                continue
            readers = {r for t in net.nodes[candidate].output for r in net.consumers.get(t, [])}
            if not readers <= region | {name} or not readers:
                continue
            region.add(candidate)
            frontier.extend(net.producer.get(t) for t in net.nodes[candidate].input if t)
            # A node added later may make an earlier refused reader set complete: try its inputs again.
            frontier.extend(p for r in region for t in net.nodes[r].input if t
                            for p in [net.producer.get(t)] if p is not None and p not in region)
        if region:
            found.chains.append(Chain(name, sorted(region, key=net.position.__getitem__)))
    return found


def _chain_node(net: Network, name: str, outputs: set[str]) -> bool:
    node = net.nodes[name]
    return (node.op_type in CHAIN_OPS and node.domain in ("", "ai.onnx") and name not in net.parent
            and len(node.output) == 1 and node.output[0] not in outputs)


def _check(net: Network, chain: Chain, values: dict, limit: float) -> str:
    """'' when the chain's overflow only saturates on these values, else why not."""
    saturating = net.nodes[chain.saturating]
    reference = values.get(saturating.output[0])
    if reference is None:
        return "the reference run has no value for the saturating output"
    shape = np.shape(reference)
    low: dict[str, np.ndarray] = {}
    beyond = np.zeros(shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for name in chain.nodes:
            node = net.nodes[name]
            operands = []
            for tensor in node.input:
                if tensor in low:
                    operands.append(low[tensor])
                elif tensor in net.constants:
                    operands.append(np.asarray(tensor_array(net.constants[tensor]), np.float32).astype(np.float16))
                elif tensor in values and np.asarray(values[tensor]).dtype.kind == "f":
                    operands.append(np.asarray(values[tensor], np.float32).astype(np.float16))
                else:
                    return f"input {tensor} of {name} has no float value in the reference run"
            computed = CHAIN_OPS[node.op_type](*[o.astype(np.float32) for o in operands]).astype(np.float16)
            exact = values.get(node.output[0])
            if computed.shape != shape or exact is None or np.shape(exact) != shape:
                return f"{name}'s output is not shaped as {chain.saturating}'s"
            low[node.output[0]] = computed
            beyond |= ~np.isfinite(computed) | (np.abs(np.asarray(exact, np.float64)) > limit)
        function = SATURATING_OPS[saturating.op_type]
        candidate = function(low[saturating.input[0]].astype(np.float32)).astype(np.float16)
    expected = np.asarray(reference, np.float32).astype(np.float16)
    if np.isnan(candidate).any():
        return f"{saturating.op_type} gives NaN in FP16"
    if not np.array_equal(candidate[beyond], expected[beyond]):
        return f"{saturating.op_type} is not saturated wherever the chain leaves the range"
    return ""
