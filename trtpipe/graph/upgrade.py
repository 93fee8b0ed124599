"""The upgrade pass: convert to a target opset, fuse decomposed LayerNorms, save.

Decisions:
- LayerNorm fusion runs only when the model ends at opset >= 17 (where
  `LayerNormalization` exists); otherwise the refusal is logged and reported,
  not raised: the conversion alone is still a valid result.
- A converted model gets Reshape's `allowzero` default written explicitly
  (see `reshape_allowzero`): the sanitize stage ran before the conversion,
  while the model was still below opset 14.
- After the edits, stale `value_info` is stripped and shapes are inferred
  again, so the saved model describes itself truthfully (when fusion changed
  nothing, the inference it ran on an identical copy is reused: same bytes).
- No target given (`upgrade_opset.target: null`, the default and the recipes'): the
  target is max(17, the model's opset): 17 for an older model (LayerNormalization),
  the model's own opset otherwise, so a model newer than 17 (the dynamo exporter
  writes 18) is left as it is without a word (issue 33 item 4: a fixed default of 17
  warned on every opset-18 export about a target the user never set). "Not set" is
  null rather than a sentinel number or `auto`: the schema keeps an integer type, so
  `upgrade_opset.target=seventeen` is still refused at compose time.
- No target given and the model holds QuantizeLinear/DequantizeLinear (any graph, bodies included):
  the target is at least 19 (issue 31). Before opset 19 a DQ's output and a Q's input and scale
  are `tensor(float)` in the schema, so an FP16 neighbour costs a Cast at every Q/DQ; from 19 the
  scale shares the float side's type, and the precision stage types the scale instead (an FP16
  scale gives an FP16 DQ output; a Q reads FP16 directly). The report's `target_reason` and the
  stage line say why. A pinned target is respected: the user may need an older opset.
- A target the user set below the model's opset is a warning, not an error, and never a
  silent no-op: the model keeps its opset (ONNX's converter cannot be trusted
  to downgrade, and a downgrade could lose ops the model needs), the report
  holds `target_below_model` and a warning, and the stage line says so. Not an
  error because the model is valid input for every later stage as it is.
- Same input, same options: same bytes (every step is deterministic and the
  report holds no paths or times).
"""

from __future__ import annotations

import logging
from pathlib import Path

from trtpipe.onnxmodel import value_info
from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.graph.layernorm.layernorm_fusion import MIN_OPSET, fuse_layernorms_then_infer_shapes
from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.graph.passes.opset import convert_opset, default_opset
from trtpipe.graph.passes.reshape_allowzero import make_reshape_allowzero_explicit

logger = logging.getLogger(__name__)

# The target when none is set: LayerNormalization's opset.
DEFAULT_TARGET = MIN_OPSET
# The first opset whose Q/DQ scales may be FP16/BF16 (the scale shares the float side's type).
QDQ_TARGET = 19
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def upgrade_model(
    src: Path, dst: Path, *, target_opset: int | None = None, fuse_layernorm: bool = True,
    link_data_under: Path | None = None, hard_links_ok: bool = False,
) -> dict:
    """Read `src`, convert and fuse, write `dst`; returns a JSON-serialisable report.

    `target_opset`: None for max(DEFAULT_TARGET, the model's opset) (module docstring).
    `link_data_under`: see `onnx_io.save_model` (the runner passes the cache's entries).
    `hard_links_ok`: `src` is trtpipe's own file (see `onnx_io.load_model`).
    """
    source = load_model(Path(src), weights_on_disk=True, hard_links_ok=hard_links_ok)
    opset_before = default_opset(source)
    pinned = target_opset is not None
    quantized = not pinned and _holds_qdq(source)
    target_opset = target_opset if pinned else max(QDQ_TARGET if quantized else DEFAULT_TARGET, opset_before)
    model = convert_opset(source, target_opset)
    opset_after = default_opset(model)
    report: dict = {
        "opset_before": opset_before,
        "opset_after": opset_after,
        "converted": opset_after != opset_before,
        "nodes_before": len(source.graph.node),
        "warnings": [],
    }
    if quantized and opset_before < QDQ_TARGET:
        report["target_reason"] = (f"raised to {QDQ_TARGET}: the model holds QuantizeLinear/DequantizeLinear, whose "
                                   f"scales may be FP16 from opset {QDQ_TARGET} (no Cast at each Q/DQ)")
    if pinned and 0 < target_opset < opset_before:
        report["target_below_model"] = True
        warning = (f"upgrade_opset.target={target_opset} is below the model's opset {opset_before}: the model is "
                   f"left at opset {opset_before} (never downgraded); set upgrade_opset.target={opset_before} "
                   "or higher to say so, or drop upgrade_opset from stages")
        report["warnings"].append(warning)
        logger.warning("upgrade_opset: %s", warning)
    if report["converted"]:
        # Sanitize ran before the conversion, when these Reshapes were below
        # opset 14; write the allowzero default now for the same reason.
        report["reshape_allowzero_made_explicit"] = make_reshape_allowzero_explicit(model, opset_after)
    if fuse_layernorm and opset_after >= MIN_OPSET:
        # Strips the value_info its rewrite made stale, then infers shapes (once, if nothing was fused).
        model, report["layernorm"] = fuse_layernorms_then_infer_shapes(model)
    else:
        if fuse_layernorm:
            reason = f"model is at opset {opset_after}; LayerNormalization needs opset {MIN_OPSET}"
            logger.info("LayerNorm fusion skipped: %s", reason)
            report["layernorm"] = {"fused": [], "refused": [], "skipped": reason}
        model = value_info.infer_shapes(model)
    written = save_model(model, Path(dst), link_data_under=link_data_under)
    report["nodes_after"] = len(model.graph.node)
    report["files"] = [path.name for path in written]
    return report


def _holds_qdq(model) -> bool:
    """Whether any graph of `model` (bodies included) has a default-domain QuantizeLinear/DequantizeLinear."""
    return any(node.op_type in QDQ_OPS and node.domain in DEFAULT_DOMAINS
               for graph in all_graphs(model.graph) for node in graph.node)
