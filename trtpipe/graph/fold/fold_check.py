"""Whether one more constant-folding pass could change a model: a cheap, conservative test.

Polygraphy's `fold_constants` repeats onnx-graphsurgeon's folding until a
pass removes no node, and sanitize then runs it again with recursive
partitioning (sanitize.py). On a model the first pass folded completely, each
of those later passes is a full graphsurgeon import, graph copy, export and
shape inference that changes nothing: two thirds of sanitize's time on a
large encoder (96 layers: 3 s of 4.5 s).

`may_fold(model)` answers False only when no pass of onnx-graphsurgeon 0.6.x's
`Graph.fold_constants` (with `fold_shapes=True`) can find anything to do on
`model`; any doubt answers True, and the passes then run as before. It
over-approximates graphsurgeon's own analysis (graph.py, `fold_constants`
passes 1-4):

- a `Constant` node (lowered into a constant tensor);
- a node whose non-empty inputs are all initializers or outputs of such
  nodes, including nodes without inputs (graphsurgeon's `is_foldable`; the
  Q/DQ ops it never folds are excluded exactly as it excludes them);
- a `Shape` whose input has a static shape, or a `Gather`/`Slice` of a
  `Shape` (`fold_shape_gather`, `fold_shape_slice`) that selects static
  dimensions; a dimension counts as static unless it is a `dim_param`
  (graphsurgeon reads a dimension without either field as unknown; counting
  it static only errs towards True);
- the shape-tensor Cast elision (`run_cast_elision`): a node of the ops it
  rewrites that reads a Cast to float and whose every consumer is a Cast;
- any If/Loop/Scan body or model-local function (folded and flattened
  recursively: not analysed here, always True).

Decision: a foldable tensor that graphsurgeon refuses to fold (larger than the
size threshold, left by the growth rule of growth.py, or an ONNX Runtime
failure) stays foldable here, so such a
model keeps every pass; only a model with nothing left to fold skips them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.weights_on_disk import is_on_disk
from trtpipe.onnxmodel.subgraphs import has_body

NEVER_FOLDED = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
# Ops whose values are drawn at run time: fast_fold.py refuses to fold them (here, not there, so that
# trtpipe-inspect's preview reads the rule without importing the folding pass and its dependencies).
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})
CAST_ELISION_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Greater", "Less", "Concat"})
# Constant is lowered; the standard ops with bodies (If, Loop, Scan, SequenceMap) are folded and
# flattened recursively, which is not analysed here. Checking the op type rather than every
# attribute's type keeps this test a small fraction of one folding pass.
ALWAYS_MAY_FOLD = frozenset({"Constant", "If", "Loop", "Scan", "SequenceMap"})


def may_fold(model: onnx.ModelProto, settled: frozenset | set = frozenset()) -> bool:
    """False only when a constant-folding pass certainly changes nothing (module docstring).

    `settled`: first outputs of nodes the growth rule excluded on known sizes (growth.py); every later
    pass excludes them again, so they count as not foldable here.
    """
    graph = model.graph
    if model.functions:
        return True
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    constant = set(initializers)
    producers: dict[str, onnx.NodeProto] = {}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        if node.op_type in ALWAYS_MAY_FOLD:
            return True
        if node.domain not in DEFAULT_DOMAINS and has_body(node):
            return True  # a custom op with a body (standard ops with bodies are in ALWAYS_MAY_FOLD)
        inputs = [name for name in node.input if name]
        if node.op_type not in NEVER_FOLDED and all(name in constant for name in inputs) \
                and not (node.output and node.output[0] in settled):
            return True  # the first foldable node is enough; its consumers need not be walked
        for name in node.output:
            producers[name] = node
        for name in inputs:
            consumers.setdefault(name, []).append(node)
    shapes = _known_shapes(graph)
    graph_outputs = {value.name for value in graph.output}
    for node in graph.node:
        if node.op_type == "Shape" and _static(shapes.get(node.input[0])):
            return True
        if node.op_type in ("Gather", "Slice") and _folds_shape_part(node, producers, shapes, initializers):
            return True
        if node.op_type in CAST_ELISION_OPS and cast_elision_candidate(node, producers, consumers, graph_outputs):
            return True
    return False


def _known_shapes(graph: onnx.GraphProto) -> dict[str, list]:
    """Tensor name -> dims (int, or None for a dim_param) where the graph records a shape."""
    shapes = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value.name] = [None if dim.HasField("dim_param") else dim.dim_value for dim in tensor_type.shape.dim]
    return shapes


def _static(dims: list | None) -> bool:
    return dims is not None and all(dim is not None for dim in dims)


def _folds_shape_part(node, producers, shapes, initializers) -> bool:
    """A Gather or Slice of a Shape that might select only static dimensions."""
    shape_node = producers.get(node.input[0]) if node.input else None
    if shape_node is None or shape_node.op_type != "Shape":
        return False
    dims = shapes.get(shape_node.input[0])
    if dims is None:
        return False
    if node.op_type == "Gather":
        indices = _values(node.input[1] if len(node.input) > 1 else "", initializers)
        if indices is None:
            return True  # not readable here (on disk, or not an initializer): assume it may fold
        try:
            return all(dims[int(i)] is not None for i in np.atleast_1d(indices))
        except (IndexError, ValueError, TypeError):
            return True
    parts = [_values(name, initializers) if name else None for name in list(node.input[1:5])]
    if len(parts) < 2 or parts[0] is None or parts[1] is None or any(p is None for p in parts[2:]):
        return True  # attribute form (opset < 10) or non-constant bounds: assume it may fold
    try:
        starts, ends = int(np.ravel(parts[0])[0]), int(np.ravel(parts[1])[0])
        steps = int(np.ravel(parts[3])[0]) if len(parts) > 3 else 1
        return all(dim is not None for dim in dims[starts:ends:steps])
    except (IndexError, ValueError, TypeError):
        return True


def _values(name: str, initializers: dict) -> np.ndarray | None:
    tensor = initializers.get(name)
    if tensor is None or is_on_disk(tensor):
        return None
    return numpy_helper.to_array(tensor)


def cast_elision_candidate(node, producers, consumers, graph_outputs) -> bool:
    for name in node.output:
        if name in graph_outputs or any(reader.op_type != "Cast" for reader in consumers.get(name, [])):
            return False
    return any(
        producer is not None and producer.op_type == "Cast"
        and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in producer.attribute)
        for producer in (producers.get(name) for name in node.input if name)
    )
