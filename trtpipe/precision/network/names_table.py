"""The network's names as the precision rules see them (`precision.list_only=true`)."""

from __future__ import annotations

from pathlib import Path

from trtpipe.precision.network.network import Network


def write_names_table(net: Network, path: Path) -> int:
    lines = ["# node name\top type\toutput tensors\t(absorbed nodes, if fused)"]
    fused_from: dict[str, list[str]] = {}
    for absorbed, fused in net.absorbed_by.items():
        fused_from.setdefault(fused, []).append(absorbed)
    for name in net.names:
        node = net.nodes[name]
        absorbed = ", ".join(fused_from.get(name, []))
        lines.append(f"{name}\t{node.op_type}\t{', '.join(t for t in node.output if t)}\t{absorbed}".rstrip())
    path.write_text("\n".join(lines) + "\n")
    return len(net.names)
