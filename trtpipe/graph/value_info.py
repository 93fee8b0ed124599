"""Shape information in the graph: strip what went stale, infer it again.

Decision: after any graph edit, `value_info` entries whose tensor no longer
exists, or whose producer changed, are removed before shape inference runs
again. ONNX shape inference merges with existing entries instead of replacing
them, so a stale entry survives the edit and later stages (Cast insertion,
TensorRT's parser) trust a shape or type that is no longer true.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path

import onnx
from polygraphy.backend.onnx import infer_shapes as polygraphy_infer_shapes

from trtpipe.graph.onnx_io import PROTOBUF_LIMIT_BYTES, load_model, save_model

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
        return rederivable and producer_domain[name] in ("", "ai.onnx")

    keep = [value for value in graph.value_info if not is_stale(value.name)]
    removed = [value.name for value in graph.value_info if is_stale(value.name)]
    if removed:
        kept_copies = [onnx.ValueInfoProto.FromString(value.SerializeToString()) for value in keep]
        del graph.value_info[:]
        graph.value_info.extend(kept_copies)
        logger.debug("stripped %d value_info entries", len(removed))
    return removed


def infer_shapes(
    model: onnx.ModelProto, *, in_memory_limit_bytes: int = PROTOBUF_LIMIT_BYTES
) -> onnx.ModelProto:
    """Run ONNX shape inference; returns a new model (the argument is not modified).

    Decisions: ONNX's shape inference, not ONNX Runtime's symbolic one
    (Polygraphy's `allow_onnxruntime=False`): it needs no `sympy`, and its
    output does not depend on which optional packages are installed, so the
    same input gives the same bytes on every machine. Errors are tolerated
    (`error_ok=True`): a custom op without a schema leaves its outputs without
    shapes but must not stop the pipeline.

    Models over the protobuf limit cannot be inferred in memory; they go through
    `onnx.shape_inference.infer_shapes_path` inside our own temporary directory,
    written by our `save_model` so small int64 shape tensors stay inline where
    shape inference reads them. Polygraphy's own file route is not used: it
    converts the caller's model to external data in place and leaves its output
    file behind in the system temp directory.
    """
    if model.ByteSize() <= in_memory_limit_bytes:
        return polygraphy_infer_shapes(model, error_ok=True, allow_onnxruntime=False)
    logger.info("model over %d bytes: shape inference runs on a file", in_memory_limit_bytes)
    with tempfile.TemporaryDirectory(prefix="trtpipe_shapes_") as tmp:
        source, inferred = Path(tmp) / "model.onnx", Path(tmp) / "inferred.onnx"
        save_model(model, source, external_threshold_bytes=0)
        try:
            onnx.shape_inference.infer_shapes_path(str(source), str(inferred))
        except Exception as error:  # same tolerance as the in-memory route
            logger.warning("shape inference failed, shapes left as they were: %s", str(error).splitlines()[0])
            return load_model(source)
        return load_model(inferred)
