"""Convert a model to a newer ONNX opset with `onnx.version_converter`.

Decisions:
- Never downgrade: a model at or above the target is returned as it is
  (logged), because a downgrade can only lose ops or attributes.
- Ops of custom domains are left alone; the converter only touches the
  default domain, and their opset imports are kept. A model that imports no
  default-domain opset at all is returned as it is.
- Weights do not travel through the converter: it converts
  `value_info.weightless_copy(model)` and the weights are put back by name
  (`value_info.restore_weights`). The converter copies the whole model
  through C++, which fails for models over protobuf's 2 GB limit and costs
  time and memory for any large model; no adapter of an upgrade reads them.
- The IR version is raised to the minimum the new opset needs (opset 17
  needs IR 8), never lowered.
- A failure is a `UserError` naming the op and the fix; so is a conversion
  that would change a graph input or output (the model's interface).
"""

from __future__ import annotations

import logging

import onnx
from onnx import version_converter

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.errors import UserError
from trtpipe.onnxmodel.value_info import restore_weights, weightless_copy

logger = logging.getLogger(__name__)



def default_opset(model: onnx.ModelProto) -> int:
    """The opset version of the default ONNX domain (0 if the model imports none)."""
    versions = [entry.version for entry in model.opset_import if entry.domain in DEFAULT_DOMAINS]
    return max(versions, default=0)


def convert_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """Return `model` converted to opset `target`, or `model` itself when already there."""
    current = default_opset(model)
    if current == 0:  # only custom domains (ai.onnx.ml, training, plugins): no op the converter knows
        logger.info("model imports no default-domain opset: nothing to convert to opset %d", target)
        return model
    if current >= target:
        logger.info("model is at opset %d >= target %d: left as it is (never downgraded)", current, target)
        return model
    working = weightless_copy(model)
    try:
        converted = version_converter.convert_version(working, target)
    except Exception as error:  # the C++ converter raises RuntimeError with an assertion text
        raise _conversion_error(model, current, target, error) from None
    restore_weights(converted, model)
    _refuse_changed_interface(model, converted, current, target)
    converted.ir_version = max(converted.ir_version, _min_ir_version(converted))
    logger.info("converted model from opset %d to %d", current, target)
    return converted


def _refuse_changed_interface(model: onnx.ModelProto, converted: onnx.ModelProto, current: int, target: int) -> None:
    """A conversion must keep every graph input and output as it was (type and shape).

    Some adapters rewrite the interface: Scan 8 -> 9 drops Scan-8's batch axis
    from the graph inputs and outputs, so the converted model no longer accepts
    the original's inputs (found by the corpus run on `test_scan_sum`).
    """
    after = {value.name: value.type for value in [*converted.graph.input, *converted.graph.output]}
    for value in [*model.graph.input, *model.graph.output]:
        if after.get(value.name, value.type) != value.type:
            users = sorted({node.op_type for node in model.graph.node
                            if value.name in node.input or value.name in node.output})
            raise UserError(
                f"converting from opset {current} to {target} changes graph input/output {value.name!r} "
                f"(shape {_dims(value.type)} -> {_dims(after[value.name])}, at {', '.join(users) or 'no node'}); "
                "the converted model would not accept the original's inputs",
                "remove upgrade_opset from stages, or re-export the model at a newer opset",
            )


def _dims(type_proto: onnx.TypeProto) -> list:
    shape = type_proto.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]


def _min_ir_version(model: onnx.ModelProto) -> int:
    try:
        return onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:  # an opset newer than this onnx knows: keep what the converter wrote
        return model.ir_version


def _conversion_error(model: onnx.ModelProto, current: int, target: int, error: Exception) -> UserError:
    message = " ".join(str(error).split())
    detail = message.split(" failed: ", 1)[-1][:160]  # drop the C++ file/assertion prefix
    op_types = sorted(
        {node.op_type for node in model.graph.node if node.domain in DEFAULT_DOMAINS},
        key=len,
        reverse=True,  # longest first, so "LayerNormalization" wins over "Normalization"
    )
    culprit = next((op for op in op_types if op in message), None)
    if culprit is not None and not onnx.defs.has(culprit):
        return UserError(
            f"op {culprit} has no schema in ONNX {onnx.__version__} (an experimental or removed op, "
            f"or a custom op without its own domain), so it cannot be converted from opset {current} to {target}",
            "remove upgrade_opset from stages, or re-export the model without that op",
        )
    fix = "set upgrade_opset.target to a lower opset or remove upgrade_opset from stages"
    highest = _highest_opset_keeping(culprit, current, target) if culprit else None
    if highest is not None:
        fix = f"set upgrade_opset.target to {highest} or remove upgrade_opset from stages"
    what = f"op {culprit}" if culprit else "an op of the model"
    return UserError(f"cannot convert {what} from opset {current} to {target} ({detail})", fix)


def _highest_opset_keeping(op_type: str, current: int, target: int) -> int | None:
    """The last opset before `op_type` was deprecated, if that is above `current`."""
    try:
        schema = onnx.defs.get_schema(op_type, target)
    except Exception:  # no schema at all (unknown op): no better target to suggest
        return None
    if not schema.deprecated:
        return None
    highest = schema.since_version - 1
    return highest if highest > current else None
