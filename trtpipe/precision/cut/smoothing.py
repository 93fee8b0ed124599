"""Optional smoothing: an isolated low-precision island of a few cheap nodes
between FP32 nodes costs two Casts and saves nothing; it joins its neighbours.

Decision: only low → FP32 (never the reverse: FP32 was chosen for accuracy), only
nodes whose precision came from the default (never a user rule or authored), and
never islands containing MatMul/Conv/Gemm (their FLOPs are what FP16 is for).
"""

from __future__ import annotations

from trtpipe.precision.network.decisions import LOW_PRECISIONS, Decision
from trtpipe.precision.network.network import Network

HEAVY_OPS = {"MatMul", "Conv", "Gemm", "ConvTranspose", "Einsum"}


def smooth_islands(net: Network, decisions: dict[str, Decision], island_size: int) -> int:
    """Flip qualifying islands to FP32 in place; returns how many nodes changed."""
    if island_size <= 0:
        return 0
    seen: set[str] = set()
    changed = 0
    for start in net.names:
        if start in seen or not _movable(decisions[start]):
            continue
        island, border = _island(net, decisions, start)
        seen.update(island)
        heavy = any(net.op_type(n) in HEAVY_OPS for n in island)
        if len(island) <= island_size and not heavy and border and all(
            decisions[b].precision == "fp32" for b in border
        ):
            for name in island:
                decisions[name] = Decision(
                    "fp32",
                    f"smoothing: isolated {decisions[name].precision} island of {len(island)} node(s) between fp32 "
                    f"nodes (precision.auto.island_size={island_size})",
                    "auto",
                )
            changed += len(island)
    return changed


def _movable(decision: Decision) -> bool:
    return decision.source == "default" and decision.precision in LOW_PRECISIONS


def _island(net: Network, decisions: dict[str, Decision], start: str) -> tuple[set[str], set[str]]:
    island, border, stack = {start}, set(), [start]
    while stack:
        name = stack.pop()
        node = net.nodes[name]
        neighbours = [net.producer[t] for t in node.input if t in net.producer and net.is_float(t)]
        neighbours += [c for t in net.float_outputs(name) for c in net.consumers.get(t, [])]
        for other in neighbours:
            if other in island or other in border:
                continue
            if _movable(decisions[other]) and decisions[other].precision == decisions[start].precision:
                island.add(other)
                stack.append(other)
            elif decisions[other].precision in ("fp32", "fp16", "bf16"):
                border.add(other)
    return island, border
