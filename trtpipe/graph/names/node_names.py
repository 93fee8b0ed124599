"""Make node names unique within each graph (main graph and every If/Loop/Scan body).

Decisions:
- ONNX requires nothing of node names, but ONNX Runtime refuses a graph in
  which two nodes share a non-empty name ("two nodes with same node name"),
  and every later stage that runs the model (folding, precision's range
  measurement, validation) would then fail with a message about ONNX
  Runtime. Sanitize therefore renames the second and later holders of a name
  `<name>_<k>` (the smallest k >= 1 free in that graph), first holder keeps
  its name, in node order; the renames are returned for the stage report
  and the log, so a precision rule can be written against the new names.
- Uniqueness is per graph, as ONNX Runtime checks it: an If's two branches
  may reuse a name (graph/names/scopes.py qualifies body names for the plan), so
  renaming across graphs would change names for nothing.
- Empty names are left alone: ONNX Runtime accepts any number of them and
  the parser names such layers after their first output.
"""

from __future__ import annotations

import onnx

from trtpipe.graph.names.parser_names import unique_name

from trtpipe.onnxmodel.subgraphs import all_graphs


def make_node_names_unique(model: onnx.ModelProto) -> list[dict]:
    """Rename duplicate node names in place; returns [{"from", "to", "op_type"}] in graph order."""
    renamed = []
    for graph in all_graphs(model.graph):
        taken = {node.name for node in graph.node if node.name}
        seen: set[str] = set()
        for node in graph.node:
            if not node.name:
                continue
            if node.name not in seen:
                seen.add(node.name)
                continue
            new = unique_name(node.name, taken)  # the one `<name>_<k>` rule (parser_names.py)
            taken.add(new)
            seen.add(new)
            renamed.append({"from": node.name, "to": new, "op_type": node.op_type})
            node.name = new
    return renamed
