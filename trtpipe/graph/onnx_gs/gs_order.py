"""onnx-graphsurgeon's `cleanup()` and `toposort()` node order, computed on the ModelProto directly.

sanitize's "cleanup and topological sort" pass imports the model into
onnx-graphsurgeon, cleans, sorts and exports it; constant folding, which runs
right after it, imports and exports the model again (Polygraphy). On a
96-layer encoder the first round trip alone costs ~0.6 s. When folding
follows, only the *node list* of the first round trip matters: the folding
round trip rebuilds everything else (initializer and value_info order, which
graphsurgeon derives from the nodes; attributes; fields). So this module
gives that node list without graphsurgeon:

- cleanup (graphsurgeon 0.6.x `Graph.cleanup`, `remove_unused_graph_inputs=False`):
  keep the nodes that some graph output depends on, in list order;
- toposort (`Graph.toposort`): a node's level is 0 without local producers,
  else 1 + its producers' highest level; levels are assigned depth-first,
  nodes taken in list order and each node's producers in input order, and the
  nodes are then sorted by level, stably in the order levels were assigned.

`cleaned_and_sorted(model, cleanup=...)` returns None whenever the model is
outside what is reproduced here (If/Loop/Scan bodies, local functions, a
tensor with more than one producer, a cycle, sparse initializers): sanitize
then takes the graphsurgeon round trip as before. A test compares the result
after folding, byte for byte, with the round trip's.
"""

from __future__ import annotations

import onnx

from trtpipe.onnxmodel.subgraphs import has_body



def cleaned_and_sorted(model: onnx.ModelProto, *, cleanup: bool) -> onnx.ModelProto | None:
    """A copy of `model` whose nodes are graphsurgeon's cleaned, sorted list; None when out of scope."""
    graph = model.graph
    if model.functions or graph.sparse_initializer:
        return None
    nodes = list(graph.node)
    inputs, producer = [], {}
    for index, node in enumerate(nodes):
        if has_body(node):
            return None
        inputs.append([name for name in node.input if name])
        for name in node.output:
            if name:
                if name in producer:
                    return None
                producer[name] = index
    if cleanup:
        for value in graph.input:  # graphsurgeon's cleanup disconnects producers of graph inputs first
            producer.pop(value.name, None)
    # Each node's producers, once, in input order (graphsurgeon's get_used_nodes).
    sources = [list(dict.fromkeys(producer[name] for name in names if name in producer)) for names in inputs]
    kept = _used(graph, sources, producer) if cleanup else range(len(nodes))
    order = _level_order([i for i in range(len(nodes)) if i in kept] if cleanup else list(kept), sources)
    if order is None:
        return None
    result = onnx.ModelProto()
    result.CopyFrom(model)  # cheap for large models: their weights stay on disk (weights_on_disk.py)
    del result.graph.node[:]
    result.graph.node.extend(nodes[i] for i in order)  # copies, in C++
    return result


def _used(graph: onnx.GraphProto, sources: list[list[int]], producer: dict[str, int]) -> set[int]:
    """Indices of the nodes some graph output depends on."""
    pending = [producer[value.name] for value in graph.output if value.name in producer]
    used = set(pending)
    while pending:
        for source in sources[pending.pop()]:
            if source not in used:
                used.add(source)
                pending.append(source)
    return used


def _level_order(indices: list[int], sources: list[list[int]]) -> list[int] | None:
    """graphsurgeon's toposort of the kept nodes `indices`; None on a cycle."""
    kept = set(indices)
    levels: dict[int, int] = {}  # insertion order = the order graphsurgeon assigns levels
    for root in indices:
        if root in levels:
            continue
        stack = [(root, [s for s in sources[root] if s in kept], 0)]
        visiting = {root}
        while stack:
            index, inputs, position = stack[-1]
            if position < len(inputs):
                stack[-1] = (index, inputs, position + 1)
                source = inputs[position]
                if source in levels:
                    continue
                if source in visiting:
                    return None
                visiting.add(source)
                stack.append((source, [s for s in sources[source] if s in kept], 0))
                continue
            stack.pop()
            visiting.discard(index)
            levels[index] = 1 + max((levels[source] for source in inputs), default=-1)
    return sorted(levels, key=levels.__getitem__)  # stable: ties keep the assignment order
