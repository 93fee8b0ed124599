"""Shape nodes with `start`/`end`, written so that constant folding reads them right.

The trap: since opset 15, `Shape(x, start=a, end=b)` returns `shape(x)[a:b]`.
onnx-graphsurgeon's shape folding (used by Polygraphy's `fold_constants` with
`fold_shapes=True`; 0.6.1 at the time of writing) ignores both attributes:
it folds such a node into the *whole* shape of `x`, and its Gather/Slice
shape passes index that whole shape too. The result is a wrong constant, so
the folded model computes something else or no longer passes shape inference
(found by the corpus run on ONNX's `Attention` function expansions).

The fix, around folding:
- `split_shape_ranges` writes each such node as what it means,
  `Shape(x) -> Slice(starts=[a], ends=[b])`, which the folding understands
  (a static `x` folds to the right slice; a dynamic one is left alone);
- `restore_shape_ranges` turns every pair that folding left in place back
  into the original node, so a model whose ranged Shapes do not fold comes out
  as it went in. Main graph and subgraphs alike (folding recurses into both).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs

WHOLE_SUFFIX = "__trtpipe_whole_shape"
START_SUFFIX = "__trtpipe_shape_start"
END_SUFFIX = "__trtpipe_shape_end"
INT64_MAX = np.iinfo(np.int64).max


def split_shape_ranges(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Rewrite ranged Shape nodes in place; returns copies of the original nodes."""
    originals = []
    for graph in all_graphs(model.graph):
        if not any(_range(node) is not None for node in graph.node):
            continue  # nothing to rewrite: the node list stays as it is (rewriting it copies every node)
        nodes = []
        for node in graph.node:
            bounds = _range(node)
            if bounds is None:
                nodes.append(node)
                continue
            originals.append(onnx.NodeProto.FromString(node.SerializeToString()))
            out = node.output[0]
            graph.initializer.extend([
                numpy_helper.from_array(np.array([bounds[0]], dtype=np.int64), out + START_SUFFIX),
                numpy_helper.from_array(np.array([bounds[1]], dtype=np.int64), out + END_SUFFIX),
            ])
            nodes.append(helper.make_node("Shape", [node.input[0]], [out + WHOLE_SUFFIX], name=node.name))
            nodes.append(helper.make_node("Slice", [out + WHOLE_SUFFIX, out + START_SUFFIX, out + END_SUFFIX],
                                          [out], name=f"{node.name or out}__trtpipe_shape_range"))
        del graph.node[:]
        graph.node.extend(nodes)
    return originals


def restore_shape_ranges(model: onnx.ModelProto, originals: list[onnx.NodeProto]) -> int:
    """Put back each original node whose Shape -> Slice pair is still in `model`; returns how many."""
    by_output = {node.output[0]: node for node in originals}
    restored = 0
    for graph in all_graphs(model.graph):
        if by_output:  # without originals every node would stay: the list is not rewritten (a copy of each)
            producers = {out: node for node in graph.node for out in node.output}
            nodes = []
            for node in graph.node:
                original = by_output.get(node.output[0]) if node.op_type == "Slice" and node.output else None
                whole = producers.get(node.input[0]) if original is not None else None
                if whole is not None and whole.op_type == "Shape" and node.input[0] == node.output[0] + WHOLE_SUFFIX:
                    nodes.remove(whole)  # it precedes the Slice; the original reads the same input
                    nodes.append(original)
                    restored += 1
                else:
                    nodes.append(node)
            del graph.node[:]
            graph.node.extend(nodes)
        if not any(t.name.endswith((START_SUFFIX, END_SUFFIX)) for t in graph.initializer):
            continue
        used = {name for node in graph.node for name in node.input}
        kept = [t for t in graph.initializer if t.name in used or not t.name.endswith((START_SUFFIX, END_SUFFIX))]
        if len(kept) != len(graph.initializer):
            del graph.initializer[:]
            graph.initializer.extend(kept)
    return restored


def _range(node: onnx.NodeProto) -> tuple[int, int] | None:
    """(start, end) of a default-domain Shape that has a non-default range, else None."""
    if node.op_type != "Shape" or node.domain not in DEFAULT_DOMAINS:
        return None
    values = {a.name: a.i for a in node.attribute if a.name in ("start", "end")}
    if not values or values == {"start": 0}:
        return None
    return values.get("start", 0), values.get("end", INT64_MAX)
