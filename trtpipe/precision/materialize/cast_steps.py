"""Where the Casts of a materialised model run: once, or on every step of a Loop/Scan.

`totals.casts` of the plan: `{"once": N, "per_step": {<Loop/Scan node>: M}}`.

Decisions:
- Every Cast node of the model is counted, the author's and trtpipe's alike: what a
  user pays at inference is every conversion that runs, whoever wrote it.
- A Cast inside a Loop/Scan body (at any depth of If branches within it) counts under
  that Loop/Scan node's (qualified) name: it runs on every step. Under nested loops it
  counts under the innermost one, whose steps it runs on.
- A Cast of the main graph, or of an If branch outside any loop, runs at most once per
  inference: `once`.
- Loops whose bodies hold no Cast are not listed; `per_step` is `{}` without loops.
"""

from __future__ import annotations

from collections import Counter

import onnx

from trtpipe.graph.names.scopes import node_subgraphs
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS

LOOPS = frozenset({"Loop", "Scan"})


def cast_steps(model: onnx.ModelProto) -> dict:
    """`{"once": Casts run once, "per_step": {loop node: Casts in its body}}` of `model`."""
    counts: Counter[str | None] = Counter()
    _count(model.graph, None, counts)
    once = counts.pop(None, 0)
    return {"once": once, "per_step": dict(sorted(counts.items()))}


def _count(graph: onnx.GraphProto, loop: str | None, counts: Counter) -> None:
    for node in graph.node:
        standard = node.domain in DEFAULT_DOMAINS
        if standard and node.op_type == "Cast":
            counts[loop] += 1
        for _, body in node_subgraphs(node):
            _count(body, node.name if standard and node.op_type in LOOPS else loop, counts)
