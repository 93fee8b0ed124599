"""Shape information in the graph: strip what went stale, infer it again.

Decision: after any graph edit, `value_info` entries whose tensor no longer
exists, or whose producer changed, are removed before shape inference runs
again. ONNX shape inference merges with existing entries instead of replacing
them, so a stale entry survives the edit and later stages (Cast insertion,
TensorRT's parser) trust a shape or type that is no longer true.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import onnx
from polygraphy.backend.onnx import infer_shapes as polygraphy_infer_shapes

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.model_parts import model_without_initializers
from trtpipe.onnxmodel.onnx_io import is_weight
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.onnxmodel.weights_on_disk import set_external, tensor_nbytes

logger = logging.getLogger(__name__)

ProducerSignature = tuple[str, str, tuple[str, ...], int]


def producer_signatures(model: onnx.ModelProto) -> dict[str, ProducerSignature]:
    """For each tensor of the main graph: (op type, domain, input names, output index) of its producer."""
    return {
        output: (node.op_type, node.domain, tuple(node.input), index)
        for node in model.graph.node
        for index, output in enumerate(node.output)
        if output
    }


def changed_producers(
    before: dict[str, ProducerSignature], after: dict[str, ProducerSignature]
) -> set[str]:
    """Tensors present before and after an edit whose producer is not the same node."""
    return {name for name, signature in after.items() if before.get(name, signature) != signature}


def strip_value_info(
    model: onnx.ModelProto, *, changed: Iterable[str] = (), rederivable: bool = False
) -> list[str]:
    """Remove stale `value_info` entries of the main graph in place; returns their names.

    Stale means: no node produces the tensor any more, the tensor is a graph
    input, output or initializer (its type is recorded there already), or it is
    named in `changed` (its producer was replaced). With `rederivable=True`,
    also every entry that shape inference can derive again (outputs of
    default-domain ops); only outputs of custom ops keep theirs, since nothing
    else can derive them.
    """
    graph = model.graph
    producer_domain = {output: node.domain for node in graph.node for output in node.output}
    recorded_elsewhere = (
        {value.name for value in graph.input}
        | {value.name for value in graph.output}
        | {tensor.name for tensor in graph.initializer}
    )
    changed = set(changed)

    def is_stale(name: str) -> bool:
        if name not in producer_domain or name in recorded_elsewhere or name in changed:
            return True
        return rederivable and producer_domain[name] in DEFAULT_DOMAINS

    stale = [index for index, value in enumerate(graph.value_info) if is_stale(value.name)]
    removed = [graph.value_info[index].name for index in stale]
    if len(stale) <= FEW_STALE:  # a few (a fusion's outputs): deleted in place, nothing else copied
        for index in reversed(stale):
            del graph.value_info[index]
    else:
        keep = [value for value in graph.value_info if not is_stale(value.name)]
        kept_copies = [onnx.ValueInfoProto.FromString(value.SerializeToString()) for value in keep]
        del graph.value_info[:]
        graph.value_info.extend(kept_copies)
    if removed:
        logger.debug("stripped %d value_info entries", len(removed))
    return removed


FEW_STALE = 256  # each in-place delete moves the entries after it; beyond this, one rebuild is cheaper


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Run ONNX shape inference on `model`, in place; returns `model`.

    Decisions: ONNX's shape inference, not ONNX Runtime's symbolic one
    (Polygraphy's `allow_onnxruntime=False`): it needs no `sympy`, and its
    output does not depend on which optional packages are installed, so the
    same input gives the same bytes on every machine. Errors are tolerated
    (`error_ok=True`): a custom op without a schema leaves its outputs without
    shapes but must not stop the pipeline.

    Inference runs on a weightless copy (`weightless_copy`) and its results
    (`value_info` and output types of every graph) are copied back: shape
    inference never reads a weight's values, and serializing gigabytes of
    weights for it, as an in-memory inference of the whole model would, costs
    seconds per call and fails beyond protobuf's 2 GiB limit.
    """
    return infer_shapes_keeping_weightless(model)[0]


def infer_shapes_keeping_weightless(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """`infer_shapes(model)`, also returning `weightless_copy(model)` of the result (built once:
    the copy inference ran on, given the same results), for a caller that infers again."""
    weightless = weightless_copy(model)
    inferred = polygraphy_infer_shapes(weightless, error_ok=True, allow_onnxruntime=False)
    targets = (model,) if inferred is weightless else (model, weightless)
    for target in targets:
        copy_inferred(inferred, target)
    return model, weightless


def copy_inferred(inferred: onnx.ModelProto, target: onnx.ModelProto) -> None:
    """`inferred`'s value_info and output types, graph by graph (bodies too), onto `target`, a model
    with the same graphs (e.g. the one inference ran on a weightless copy of)."""
    for graph, result in zip(all_graphs(target.graph), all_graphs(inferred.graph)):
        del graph.value_info[:]
        graph.value_info.extend(result.value_info)
        for output, typed in zip(graph.output, result.output):
            output.type.CopyFrom(typed.type)


def inferred_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A weightless copy of `model` with shapes inferred: to read types and shapes from."""
    return onnx.shape_inference.infer_shapes(weightless_copy(model), strict_mode=False)


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every weight of the main graph replaced by a reference to nowhere.

    Weights are the tensors `save_model` would move to an external file (float
    and quantized types, 1 KiB and more); small integer tensors stay, since shape
    inference reads their values (Reshape's shape, Slice's bounds).
    """
    copy = model_without_initializers(model)
    for tensor in model.graph.initializer:
        if is_weight(tensor):
            placeholder = copy.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
            set_external(placeholder, _NOWHERE, 0, tensor_nbytes(tensor))
        else:
            copy.graph.initializer.append(tensor)
    return copy


_NOWHERE = "trtpipe-weightless-copy"


def restore_weights(derived: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """Put `model`'s weights back, by name, into a model derived from `weightless_copy(model)`.

    A placeholder nothing matches (a pass renamed or copied a weight) is an error:
    a bug to hear about, not a model to write with a reference to nowhere.
    """
    originals: dict[str, list[onnx.TensorProto]] = {}
    for tensor in model.graph.initializer:
        if is_weight(tensor):
            originals.setdefault(tensor.name, []).append(tensor)
    lost = []
    for tensor in derived.graph.initializer:
        if any(entry.value == _NOWHERE for entry in tensor.external_data):
            if originals.get(tensor.name):
                tensor.CopyFrom(originals[tensor.name].pop(0))
            else:
                lost.append(tensor.name)
    if lost:
        raise RuntimeError(f"a graph pass lost track of weights {lost[:5]}")
