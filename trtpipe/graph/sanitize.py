"""The sanitize pass: make an exported model clean and explicit before anything else.

In order: strip `value_info` that shape inference will derive again, remove
dead nodes and sort topologically (onnx-graphsurgeon), infer shapes and fold
constants (Polygraphy's loaders), strip `value_info` that went stale, infer
shapes again, write Reshape's `allowzero` default explicitly, save.

Decisions (each with its reason):
- Polygraphy's `fold_constants` is used as is, twice: first without
  partitioning (the whole constant subgraph in one ONNX Runtime session:
  fast, and all that is needed when ONNX Runtime can evaluate it), then with
  `partitioning="recursive"`, so a subgraph ONNX Runtime cannot evaluate (an
  op or type its CPU kernels lack) does not stop the rest from folding.
  Not "basic": onnx-graphsurgeon 0.6.1 retries a failed "basic" partition
  unchanged until Python's recursion limit (~1000 ONNX Runtime sessions, over
  a minute, then Polygraphy drops the whole pass), and even without a
  failure it copies the constant subgraph once per output, quadratic in the
  number of foldable nodes (corpus: light Inception v2 took 49 s instead of
  4 s; the bf16 Attention expansions 74 s instead of 0.8 s). Also:
  `error_ok=True` so a failed pass keeps
  what earlier passes folded; `size_threshold=FOLD_SIZE_THRESHOLD_BYTES` so an
  Expand/Tile of a constant is not materialised into a huge initializer
  (TensorRT folds those at build time anyway); shape inference between passes
  only when `infer_shapes` is on, and always ONNX's (not ONNX Runtime's
  symbolic one), for reproducible bytes.
- onnx-graphsurgeon's folding requires topological order and Polygraphy's
  folding always runs `cleanup()`: folding therefore sorts and removes dead
  nodes even when `toposort`/`cleanup` are off; the report says so.
- A folded graph that reads tensors nothing produces is dropped for the
  unfolded one, with a warning: onnx-graphsurgeon (0.6.1) inlines an If whose
  condition folds but can lose its branch's constants (corpus: the AffineGrid
  expansions), and the checker would then blame the user's model.
- Graph inputs are never removed, even unused ones: they are the interface.
- Model-level fields dropped by graphsurgeon (metadata_props, doc_string) are
  copied back from the source model.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from polygraphy.backend.onnx import fold_constants as polygraphy_fold_constants
from polygraphy.logger import G_LOGGER as POLYGRAPHY_LOGGER

from trtpipe.errors import UserError
from trtpipe.graph import value_info
from trtpipe.graph.gs_bridge import graph_from_model, model_from_graph, restore_model_fields
from trtpipe.graph.onnx_io import load_model, save_model
from trtpipe.graph.opset import default_opset
from trtpipe.graph.reshape_allowzero import make_reshape_allowzero_explicit
from trtpipe.graph.shape_ranges import restore_shape_ranges, split_shape_ranges
from trtpipe.graph.weights_on_disk import is_on_disk, load_into_memory

logger = logging.getLogger(__name__)

FOLD_SIZE_THRESHOLD_BYTES = 64 << 20
# Whole constant subgraph in one ONNX Runtime session first, then per output what is left.
FOLD_PARTITIONINGS = (None, "recursive")


def sanitize_model(
    src: Path,
    dst: Path,
    *,
    infer_shapes: bool = True,
    fold_constants: bool = True,
    cleanup: bool = True,
    toposort: bool = True,
    fix_reshape_allowzero: bool = True,
) -> dict:
    """Read `src`, sanitize it, write `dst`; returns a JSON-serialisable report."""
    source = load_model(Path(src), weights_on_disk=True)
    nodes_before = len(source.graph.node)
    report: dict = {"nodes_before": nodes_before, "warnings": []}
    model = source
    # Decision: with shape inference on, existing value_info of standard ops is
    # dropped and derived afresh before anything reads it. It may be stale from
    # edits made before trtpipe, and constant folding trusts it: a wrong shape
    # would be folded into a wrong Shape constant. Custom ops keep theirs.
    stripped = value_info.strip_value_info(model, rederivable=infer_shapes)
    # Polygraphy prints progress at INFO on stdout; only its warnings are wanted.
    with POLYGRAPHY_LOGGER.verbosity(POLYGRAPHY_LOGGER.WARNING):
        if cleanup or toposort or fold_constants:
            model = _cleanup_and_sort(model, cleanup=cleanup, toposort=toposort or fold_constants)
            report["dead_nodes_removed"] = nodes_before - len(model.graph.node)
        if fold_constants and not toposort:
            report["warnings"].append("the graph was sorted topologically because constant folding requires it")
        if infer_shapes:
            model = value_info.infer_shapes(model)
        if fold_constants:
            model, report["nodes_folded"], warning = _fold_constants(model, infer_shapes=infer_shapes)
            report["warnings"] += [warning] if warning else []
            if not cleanup:
                report["warnings"].append("constant folding also removed dead nodes (Polygraphy cleans up after each pass)")
        changed = value_info.changed_producers(
            value_info.producer_signatures(source), value_info.producer_signatures(model)
        )
        stripped += value_info.strip_value_info(model, changed=changed)
        report["value_info_stripped"] = len(stripped)
        if infer_shapes:
            model = value_info.infer_shapes(model)
    if fix_reshape_allowzero:
        report["reshape_allowzero_made_explicit"] = make_reshape_allowzero_explicit(model, default_opset(model))
    restore_model_fields(model, source)
    written = save_model(model, Path(dst))
    _check_valid(Path(dst), Path(src))
    report["nodes_after"] = len(model.graph.node)
    report["files"] = [path.name for path in written]
    for warning in report["warnings"]:
        logger.warning("sanitize: %s", warning)
    logger.info(
        "sanitized %s: %d -> %d nodes (%d dead, %d folded)",
        Path(src).name, nodes_before, report["nodes_after"],
        report.get("dead_nodes_removed", 0), report.get("nodes_folded", 0),
    )
    return report


def _check_valid(path: Path, source: Path) -> None:
    """The ONNX checker on the result (by path, so external data over 2 GB works).

    Decision: checked after sorting, so a merely unsorted export is fixed rather
    than rejected; what remains (a node reading a tensor nothing produces, an op
    unknown to its opset) would fail later in TensorRT's parser with a worse message.
    """
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as error:
        first_line = " ".join(str(error).strip().splitlines()[0].split())[:200]
        raise UserError(
            f"model {source} is not a valid ONNX graph: {first_line}",
            "re-export the model, or check it with `python -m onnx.checker`",
        ) from None


def _cleanup_and_sort(model: onnx.ModelProto, *, cleanup: bool, toposort: bool) -> onnx.ModelProto:
    graph = graph_from_model(model)
    if cleanup:
        graph.cleanup(remove_unused_graph_inputs=False)
    if toposort:
        try:
            graph.toposort()
        except Exception as error:  # onnx-graphsurgeon raises its own exception type on a cycle
            raise UserError(
                f"the model graph cannot be sorted topologically ({' '.join(str(error).split())[:160]})",
                "re-export the model; an ONNX graph must not contain cycles",
            ) from None
    return model_from_graph(graph, like=model)


def _fold_constants(model: onnx.ModelProto, *, infer_shapes: bool) -> tuple[onnx.ModelProto, int, str | None]:
    nodes_before = len(model.graph.node)
    _load_what_folding_reads(model)
    # onnx-graphsurgeon folds Shape(start, end) into the whole shape: see shape_ranges.
    ranged_shapes = split_shape_ranges(model)
    folded = model
    for partitioning in FOLD_PARTITIONINGS:
        folded = polygraphy_fold_constants(
            folded,
            do_shape_inference=infer_shapes,
            partitioning=partitioning,
            fold_shapes=True,
            error_ok=True,
            size_threshold=FOLD_SIZE_THRESHOLD_BYTES,
            allow_onnxruntime_shape_inference=False,
        )
    restore_shape_ranges(folded, ranged_shapes)
    dangling = _dangling_inputs(folded.graph)
    if dangling:
        warning = (f"constant folding was undone: it left node inputs that nothing produces ({dangling[0]!r}; "
                   "onnx-graphsurgeon inlining an If whose condition folds)")
        restore_shape_ranges(model, ranged_shapes)
        return model, 0, warning
    return folded, nodes_before - len(folded.graph.node), None


def _load_what_folding_reads(model: onnx.ModelProto) -> int:
    """Bring into memory the on-disk weights a foldable node reads; returns how many.

    onnx-graphsurgeon evaluates every node whose inputs are all constant and
    reads those inputs' values; everything else stays on disk (weights_on_disk.py).
    Constant: initializers, Constant nodes, and (since folding runs with
    `fold_shapes=True`) Shape and Size, whose result needs no values. Erring on
    the side of constant only loads a weight too many; the other way round, the
    folding pass would fail on the unreadable weight and fold nothing. The graph
    is sorted, so one forward pass finds them.
    """
    graph = model.graph
    on_disk = {tensor.name: tensor for tensor in graph.initializer if is_on_disk(tensor)}
    constant = {tensor.name for tensor in graph.initializer}
    loaded = 0
    for node in graph.node:
        inputs = [name for name in node.input if name]
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.HasField("t") and is_on_disk(attribute.t):
                    load_into_memory(attribute.t)
                    loaded += 1
        elif node.op_type not in _SHAPE_OPS and not all(name in constant for name in inputs):
            continue
        constant.update(name for name in node.output if name)
        if node.op_type in _SHAPE_OPS:
            continue
        for name in inputs:
            if name in on_disk:
                load_into_memory(on_disk.pop(name))
                loaded += 1
    return loaded


_SHAPE_OPS = frozenset({"Shape", "Size"})


def _dangling_inputs(graph: onnx.GraphProto) -> list[str]:
    """Main-graph node inputs that are no graph input, initializer or node output."""
    known = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    known.update(name for node in graph.node for name in node.output)
    return [name for node in graph.node for name in node.input if name and name not in known]
