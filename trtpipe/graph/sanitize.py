"""The sanitize pass: make an exported model clean and explicit before anything else.

In order: strip `value_info` that shape inference will derive again, remove
dead nodes and sort topologically (onnx-graphsurgeon), infer shapes and fold
constants (Polygraphy's loaders), strip `value_info` that went stale, infer
shapes again, fold INT32 DequantizeLinear of a Conv/Gemm bias into FP32
constants (bias_dequantize.py: with them TensorRT-RTX built a quantized model
float x float), remove Casts to the type their input already has (noop_casts.py:
they are no precision decision, yet the precision stage respects every Cast),
write Reshape's `allowzero` default explicitly, save.

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
  what earlier passes folded; `size_threshold=FOLD_SIZE_THRESHOLD_BYTES` as a
  last bound on any one folded tensor; shape inference between passes
  only when `infer_shapes` is on, and always ONNX's (not ONNX Runtime's
  symbolic one), for reproducible bytes.
- Folding never inflates a model: a node whose outputs would be more than
  `fold_growth_limit` x max(its inputs' bytes, `fold_growth_floor_bytes`) is
  left unfolded (growth.py; an Expand/Tile/ConstantOfShape of a constant,
  which TensorRT evaluates at build time anyway). Polygraphy's loader cannot
  hand onnx-graphsurgeon the rule, so its loop is gs_fold.py (same bytes
  without the rule); the report lists what was left (`left_unfolded`). A node
  excluded on known sizes is excluded by every later pass too, so `may_fold`
  does not count it (an encoder with one expansion: 0.6 s -> 0.2 s).
- Folding passes that cannot change the model are skipped: after the first
  pass, `fold_check.may_fold` (conservative) says whether onnx-graphsurgeon
  could find anything more; if not, the further passes (Polygraphy's repeat
  and the recursive one), each a full graphsurgeon round trip that would fold
  nothing, are not run. When folding follows, cleanup and sort compute
  graphsurgeon's node order on the ModelProto (gs_order.py) instead of a round
  trip of their own. Both give the same bytes (tests compare); on a 96-layer
  encoder they took sanitize from 4 graphsurgeon round trips to 1.
- onnx-graphsurgeon's folding requires topological order and Polygraphy's
  folding always runs `cleanup()`: folding therefore sorts and removes dead
  nodes even when `toposort`/`cleanup` are off; the report says so.
- A folded graph that reads tensors nothing produces is dropped for the
  unfolded one, with a warning: onnx-graphsurgeon (0.6.1) inlines an If whose
  condition folds but can lose its branch's constants (corpus: the AffineGrid
  expansions), and the checker would then blame the user's model.
- sanitize never breaks a valid model. Each step is a pass (undoable_passes.py);
  the written result must meet every validity criterion the source file met
  (validity.py: onnx.checker, its full check, an ONNX Runtime session). The
  result is checked once; only when it falls short are the passes run again,
  each checked and undone for this model when it breaks it (onnx-graphsurgeon
  inlining an If nested in another If's or a Loop's body, for one), with the
  reason in the report, the stage line and the log. A result that fails the
  plain checker because the source did is the user's to fix, and the message
  quotes the checker on the user's file; never a pass's doing.
- Graph inputs are never removed, even unused ones: they are the interface.
  A non-positive `dim_value` of a graph input or output (an exporter's "any
  size") is written as a dim with no field, which every runtime reads as
  dynamic (input_dims.py); ONNX Runtime would take a 0 literally.
- Duplicate node names are made unique first (node_names.py), in every
  graph: ONNX Runtime refuses them, and folding and every later stage runs
  the model in it. The renames are in the report (`nodes_renamed`) and warned.
- Model-level fields dropped by graphsurgeon (metadata_props, doc_string) are
  copied back from the source model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from pathlib import Path

import onnx
from polygraphy.backend.onnx.util import get_num_nodes as polygraphy_num_nodes
from polygraphy.logger import G_LOGGER as POLYGRAPHY_LOGGER

from trtpipe.errors import UserError
from trtpipe.graph.passes import validity
from trtpipe.onnxmodel import input_dims
from trtpipe.onnxmodel import value_info
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.graph.fold.fast_fold import fold_pass
from trtpipe.graph.fold.fold_check import may_fold
from trtpipe.graph.fold.growth import (DEFAULT_FACTOR, DEFAULT_FLOOR_BYTES, UNKNOWN_OUTPUT, GrowthRule, Unfolded,
                                       gs_excluder)
from trtpipe.graph.fold.gs_fold import fold_constants as gs_fold_constants
from trtpipe.graph.onnx_gs.gs_bridge import graph_from_model, model_from_graph, refuse_unexportable_io, restore_model_fields
from trtpipe.graph.onnx_gs.gs_order import cleaned_and_sorted
from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.graph.names.node_names import make_node_names_unique
from trtpipe.graph.passes.bias_dequantize import bias_dequantize_pass
from trtpipe.graph.passes.noop_casts import remove_noop_casts
from trtpipe.graph.passes.opset import default_opset
from trtpipe.graph.passes.reshape_allowzero import make_reshape_allowzero_explicit
from trtpipe.graph.passes.shape_ranges import restore_shape_ranges, split_shape_ranges
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.numerics.ort_logging import quiet_onnxruntime
from trtpipe.graph.passes.undoable_passes import GraphPass, PassRefused, run_passes
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, load_into_memory

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
    remove_noop_casts: bool = True,
    fold_bias_dequantize: bool = True,
    fold_growth_limit: float | None = DEFAULT_FACTOR,
    fold_growth_floor_bytes: int = DEFAULT_FLOOR_BYTES,
) -> dict:
    """Read `src`, sanitize it, write `dst`; returns a JSON-serialisable report.

    `fold_growth_limit` (None: no limit) and `fold_growth_floor_bytes` are the growth rule (growth.py).
    """
    growth = None if fold_growth_limit is None else _growth_rule(fold_growth_limit, fold_growth_floor_bytes)
    options = dict(infer_shapes=infer_shapes, fold_constants=fold_constants, cleanup=cleanup,
                   toposort=toposort, fix_reshape_allowzero=fix_reshape_allowzero,
                   remove_noop_casts=remove_noop_casts, fold_bias_dequantize=fold_bias_dequantize, growth=growth)
    src, dst = Path(src), Path(dst)
    report, written = _sanitized(src, dst, options, required=None)
    result = validity.file_problems(dst)
    if validity.met(result) != set(validity.CRITERIA):
        source = validity.file_problems(src)
        required = validity.met(source)
        if not required <= validity.met(result):
            # Decision: the fast path checks once, at the end; only when a pass broke what the source
            # met are the passes run again, each checked and undone when it breaks the model.
            report, written = _sanitized(src, dst, options, required=required)
            result = validity.file_problems(dst, required)
            problem = validity.first_problem(result, required)
            if problem is not None:
                raise RuntimeError(f"sanitize left {src} invalid although every pass that broke it was undone "
                                   f"({problem}): a trtpipe defect, please report it with the model")
        _refuse_invalid_source(src, source, validity.file_problems(dst, [validity.CHECKER]), report)
    report["files"] = [path.name for path in written]
    for warning in report["warnings"]:
        logger.warning("sanitize: %s", warning)
    logger.info(
        "sanitized %s: %d -> %d nodes (%d dead, %d folded, %d no-op Casts removed)",
        src.name, report["nodes_before"], report["nodes_after"],
        report.get("dead_nodes_removed", 0), report.get("nodes_folded", 0), len(report.get("noop_casts_removed", ())),
    )
    return report


def _sanitized(src: Path, dst: Path, options: dict, required: set[str] | None) -> tuple[dict, list[Path]]:
    """Run the passes on `src` and write `dst`; with `required`, each pass must keep those criteria."""
    source = load_model(src, weights_on_disk=True)
    report: dict = {"nodes_before": len(source.graph.node), "warnings": []}
    signatures = value_info.producer_signatures(source)
    with contextlib.ExitStack() as stack:
        check = None
        if required is not None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtpipe_sanitize_")))

            def check(candidate: onnx.ModelProto) -> str | None:
                """The pass's result as a file, held to what the source met (validity.py)."""
                restore_model_fields(candidate, source)
                save_model(candidate, scratch / "candidate.onnx")
                problem = validity.first_problem(validity.file_problems(scratch / "candidate.onnx", required), required)
                return None if problem is None else f"its result fails {problem} (the model as given passes)"

        # Polygraphy prints progress at INFO on stdout; only its warnings are wanted.
        with POLYGRAPHY_LOGGER.verbosity(POLYGRAPHY_LOGGER.WARNING):
            model = run_passes(source, _passes(options, signatures), report, check)
    report["value_info_stripped"] = report.pop("value_info_stripped_first", 0) + report.get("value_info_stripped", 0)
    for undone in report["undone"]:
        report["warnings"].append(f"{undone['pass']} was undone for this model: {undone['reason']}")
    restore_model_fields(model, source)
    written = save_model(model, dst)
    report["nodes_after"] = len(model.graph.node)
    return report, written


def _passes(options: dict, signatures: dict) -> list[GraphPass]:
    """The sanitize passes in order, as `options` switch them on."""
    infer = options["infer_shapes"]
    fold = options["fold_constants"]
    cleanup, toposort = options["cleanup"], options["toposort"] or fold

    def strip_rederivable(model):
        # Decision: with shape inference on, existing value_info of standard ops is
        # dropped and derived afresh before anything reads it. It may be stale from
        # edits made before trtpipe, and constant folding trusts it: a wrong shape
        # would be folded into a wrong Shape constant. Custom ops keep theirs.
        stripped = len(value_info.strip_value_info(model, rederivable=infer))
        return model, {"value_info_stripped_first": stripped + (_strip_subgraph_value_info(model) if infer else 0)}

    def clean_and_sort(model):
        # Decision: when folding follows, its own graphsurgeon round trip rebuilds everything but the
        # node order, so that order is computed without a round trip of its own (gs_order.py).
        cleaned = (fold and _sorted_without_round_trip(model, cleanup=cleanup)) \
            or _cleanup_and_sort(model, cleanup=cleanup, toposort=toposort)
        warnings = ["the graph was sorted topologically because constant folding requires it"] \
            if fold and not options["toposort"] else []
        return cleaned, {"dead_nodes_removed": len(model.graph.node) - len(cleaned.graph.node), "warnings": warnings}

    def inferred(model):
        return value_info.infer_shapes(model), {}

    def folded(model):
        unfolded = Unfolded()
        result, count = _fold_constants(model, infer_shapes=infer, growth=options["growth"], unfolded=unfolded)
        warnings = []
        if not cleanup and count:
            warnings.append("constant folding also removed dead nodes (Polygraphy cleans up after each pass)")
        left = unfolded.remaining(result)
        if left:
            logger.info("sanitize: %d foldable node(s) left unfolded by the growth rule (sanitize.fold_growth_limit): "
                        "%s", len(left), ", ".join(f"{e['node'] or e['output']} ({e['op_type']}, "
                                                   f"{e['output_bytes']} bytes)" for e in left[:5]))
        return result, {"nodes_folded": count, "warnings": warnings, "left_unfolded": left}

    def refreshed(model):
        changed = value_info.changed_producers(signatures, value_info.producer_signatures(model))
        stripped = value_info.strip_value_info(model, changed=changed)
        if infer:
            value_info.infer_shapes(model)
        return model, {"value_info_stripped": len(stripped)}

    def dynamic_dims(model):
        rewritten = input_dims.clear_non_positive_io_dims(model)
        if rewritten:
            logger.info("sanitize: non-positive dim_value or placeholder dim_param ('?') written as a dynamic dim "
                        "(ONNX Runtime would take 0 literally; TensorRT reads dims sharing a name as one size): %s",
                        ", ".join(rewritten))
        return model, {"dynamic_dims_made_explicit": rewritten}

    def unique_names(model):
        renamed = make_node_names_unique(model)
        warnings = [f"{len(renamed)} node(s) shared a name and were renamed (ONNX Runtime refuses duplicate "
                    f"node names): " + ", ".join(f"{r['from']!r} ({r['op_type']}) -> {r['to']!r}" for r in renamed[:5])
                    + (", ..." if len(renamed) > 5 else "")] if renamed else []
        return model, {"nodes_renamed": renamed, "warnings": warnings}

    def noop_casts(model):
        # Types from value_info only when this sanitize inferred them (noop_casts.py says why).
        result = remove_noop_casts(model, trust_value_info=infer)
        return model, {"noop_casts_removed": result["removed"], "noop_casts_kept": result["kept"]}

    def allowzero(model):
        return model, {"reshape_allowzero_made_explicit": make_reshape_allowzero_explicit(model, default_opset(model))}

    passes = [GraphPass("duplicate node names made unique", unique_names, in_place=True),
              GraphPass("dynamic dimensions written as such", dynamic_dims, in_place=True),
              GraphPass("stale value_info removal", strip_rederivable, in_place=True)]
    if cleanup or toposort:
        passes.append(GraphPass("cleanup and topological sort", clean_and_sort))
    if infer:
        passes.append(GraphPass("shape inference", inferred, in_place=True))
    if fold:
        passes.append(GraphPass("constant folding", folded))
    if options["fold_bias_dequantize"]:
        # After folding (a bias computed from constants is an initializer by then; folding never
        # evaluates a DequantizeLinear, fold_check.NEVER_FOLDED) and before the refresh, which
        # drops the value_info of the DQ outputs this pass turns into initializers.
        passes.append(GraphPass("INT32 bias DequantizeLinear folding", bias_dequantize_pass))
    passes.append(GraphPass("value_info refresh", refreshed, in_place=True))
    if options["remove_noop_casts"]:
        # After the refresh: the types it reads are those of the final graph (folding may have
        # replaced a Cast's producer, or folded the Cast of a constant away).
        passes.append(GraphPass("no-op Cast removal", noop_casts, in_place=True))
    if options["fix_reshape_allowzero"]:
        passes.append(GraphPass("Reshape allowzero", allowzero, in_place=True))
    return passes


def _strip_subgraph_value_info(model: onnx.ModelProto) -> int:
    """Drop the value_info of If/Loop/Scan bodies that shape inference derives again; returns how many.

    Decision: as for the main graph, entries of standard ops' outputs go before
    inference runs; a stale one in a body (an exporter's edit) otherwise survives,
    and ONNX's strict inference rejects the model ("existing shape differ").
    """
    removed = 0
    for graph in list(all_graphs(model.graph))[1:]:
        produced = {output for node in graph.node if node.domain in DEFAULT_DOMAINS for output in node.output}
        keep = [value for value in graph.value_info if value.name not in produced]
        if len(keep) != len(graph.value_info):
            removed += len(graph.value_info) - len(keep)
            kept = [onnx.ValueInfoProto.FromString(value.SerializeToString()) for value in keep]
            del graph.value_info[:]
            graph.value_info.extend(kept)
    return removed


def _refuse_invalid_source(source: Path, source_problems: dict, result_problems: dict, report: dict) -> None:
    """A `UserError` when the result fails the ONNX checker because the source already did.

    Decision: checked after sorting, so a merely unsorted export is fixed rather
    than rejected; what remains (a node reading a tensor nothing produces, an op
    unknown to its opset) would fail later in TensorRT's parser with a worse message.
    The message quotes the checker on the user's own file, whole.
    """
    if result_problems.get(validity.CHECKER) is None:
        return
    reason = source_problems.get(validity.CHECKER) or result_problems[validity.CHECKER]
    # What failed on the way (a cycle stops the topological sort) says more than the checker alone.
    also = "".join(f"; {undone['pass']} failed on it too: {undone['reason']}" for undone in report["undone"])
    raise UserError(
        f"model {source} is not a valid ONNX graph (onnx.checker on that file: {reason}{also})",
        f"re-export the model; python -c \"import onnx; onnx.checker.check_model('{source}')\" shows the problem",
    )


def _cleanup_and_sort(model: onnx.ModelProto, *, cleanup: bool, toposort: bool) -> onnx.ModelProto:
    graph = graph_from_model(model)
    if cleanup:
        graph.cleanup(remove_unused_graph_inputs=False)
    if toposort:
        # A failure here (onnx-graphsurgeon raises its own type on a cycle) undoes the pass; a model
        # that really has a cycle is then refused by the checker, with the checker's words.
        graph.toposort()
    return model_from_graph(graph, like=model)


def _sorted_without_round_trip(model: onnx.ModelProto, *, cleanup: bool) -> onnx.ModelProto | None:
    refuse_unexportable_io(model)  # as graph_from_model would: the folding round trip cannot write them
    return cleaned_and_sorted(model, cleanup=cleanup)


def _growth_rule(factor, floor_bytes) -> GrowthRule:
    if not factor >= 1 or floor_bytes < 0:
        raise UserError(f"sanitize.fold_growth_limit={factor} / sanitize.fold_growth_floor_bytes={floor_bytes}: "
                        "the limit must be a number >= 1 and the floor a byte count >= 0",
                        "sanitize.fold_growth_limit=2 sanitize.fold_growth_floor_bytes=4096 (or "
                        "sanitize.fold_growth_limit=null for no limit)")
    return GrowthRule(float(factor), int(floor_bytes))


def _fold_constants(model: onnx.ModelProto, *, infer_shapes: bool, growth: GrowthRule | None = None,
                    unfolded: Unfolded | None = None) -> tuple[onnx.ModelProto, int]:
    """The folded model and how many nodes folding removed; `model` comes back as it was.

    With `growth`, every pass (fast or onnx-graphsurgeon's) leaves the nodes it excludes unfolded
    and records them into `unfolded` (growth.py).

    `PassRefused` when the folded graph reads tensors nothing produces (see the module docstring).
    """
    nodes_before = len(model.graph.node)
    _load_what_folding_reads(model)
    # onnx-graphsurgeon folds Shape(start, end) into the whole shape: see shape_ranges.
    ranged_shapes = split_shape_ranges(model)
    quiet_onnxruntime()  # onnx-graphsurgeon folds with ONNX Runtime sessions of its own (ort_logging.py)
    unfolded = Unfolded() if unfolded is None else unfolded
    exclude = None if growth is None else gs_excluder(growth, unfolded)
    options = dict(infer_shapes=infer_shapes, size_threshold=FOLD_SIZE_THRESHOLD_BYTES, should_exclude_node=exclude)
    try:
        # One pass first: when it leaves nothing foldable (fold_check.py), every later pass would be
        # an import/export round trip that changes nothing, and is skipped. Otherwise the passes go
        # on exactly as they would have (the first call's loop resumes after its first pass).
        first, rest = FOLD_PARTITIONINGS[0], FOLD_PARTITIONINGS[1:]
        # Decision: the first pass is computed on the protos when fast_fold.py reproduces it (same bytes);
        # anything it does not cover takes Polygraphy's pass, as before.
        folded = fold_pass(model, infer_shapes=infer_shapes, size_threshold=FOLD_SIZE_THRESHOLD_BYTES,
                           growth=growth, unfolded=unfolded) \
            or gs_fold_constants(model, partitioning=first, num_passes=1, **options)
        if folded is model or may_fold(folded, unfolded.settled):  # `is model`: the pass raised (Polygraphy kept the input)
            if folded is not model and polygraphy_num_nodes(folded) != polygraphy_num_nodes(model):
                folded = gs_fold_constants(folded, partitioning=first, **options)  # the loop resumes
            for partitioning in rest:
                folded = gs_fold_constants(folded, partitioning=partitioning, **options)
        if growth is not None and any(entry["reason"] == UNKNOWN_OUTPUT for entry in unfolded.remaining(folded)):
            # Decision: what shape inference could not size after every pass is folded when its sources are
            # within the floor (growth.py); one more pass, the recursive one, only for such models.
            lenient = dataclasses.replace(growth, unknown_folds=True)
            folded = gs_fold_constants(folded, partitioning=FOLD_PARTITIONINGS[-1],
                                       **{**options, "should_exclude_node": gs_excluder(lenient, unfolded)})
    finally:
        restore_shape_ranges(model, ranged_shapes)  # the input model comes back as it was, whatever happens
    restore_shape_ranges(folded, ranged_shapes)
    dangling = _dangling_inputs(folded.graph)
    if dangling:
        raise PassRefused(f"it left node inputs that nothing produces ({dangling[0]!r}; "
                          "onnx-graphsurgeon inlining an If whose condition folds)")
    return folded, nodes_before - len(folded.graph.node)


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
