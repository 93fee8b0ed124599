"""Polygraphy's constant-folding loader (`FoldConstants`, 0.53) with onnx-graphsurgeon's `should_exclude_node`.

Polygraphy's `fold_constants` does not pass `should_exclude_node` on to
onnx-graphsurgeon's `Graph.fold_constants`, and the growth rule (growth.py)
needs it. This is its loop as written there: per pass, import into
onnx-graphsurgeon, fold, `cleanup()`, export without type check, ONNX shape
inference (never ONNX Runtime's, as sanitize asks of Polygraphy); passes
repeat until one removes no node (counting nodes in bodies too) or
`num_passes` ran; a pass that raises ends the loop and keeps what came before
(`error_ok=True`). Without an exclusion it writes Polygraphy's bytes
(tests/graph/test_no_inflation.py compares).
"""

from __future__ import annotations

import onnx
from polygraphy.backend.onnx import gs_from_onnx
from polygraphy.backend.onnx import infer_shapes as polygraphy_infer_shapes
from polygraphy.backend.onnx.util import get_num_nodes
from polygraphy.logger import G_LOGGER


def fold_constants(model: onnx.ModelProto, *, partitioning: str | None, infer_shapes: bool, size_threshold: int,
                   should_exclude_node=None, num_passes: int | None = None) -> onnx.ModelProto:
    """Polygraphy's `fold_constants(model, fold_shapes=True, error_ok=True, allow_onnxruntime_shape_inference=False,
    ...)`, `should_exclude_node` handed to onnx-graphsurgeon."""
    import onnx_graphsurgeon as gs

    def one_pass(model):
        graph = gs_from_onnx(model)
        del model
        graph.fold_constants(fold_shapes=True, partitioning=partitioning, size_threshold=size_threshold,
                             should_exclude_node=should_exclude_node)
        model = gs.export_onnx(graph.cleanup(), do_type_check=False)
        del graph
        if infer_shapes:
            model = polygraphy_infer_shapes(model, allow_onnxruntime=False)
        return model

    before, after, index = len(model.graph.node), -1, 0
    while before != after and (num_passes is None or index < num_passes):
        before = get_num_nodes(model)
        try:
            model = one_pass(model)
        except Exception as error:  # noqa: BLE001 - Polygraphy's error_ok: keep what the passes so far folded
            G_LOGGER.warning(f"Constant folding pass failed. Skipping subsequent passes.\nNote: Error was:\n{error}")
            break
        after = get_num_nodes(model)
        index += 1
    return model
