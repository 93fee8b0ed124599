"""What the FP16/BF16 emulation refuses, and what the user can do instead.

Decision: refusing is better than emulating something else. Each check below
guards a case where the Cast-pair emulation (`emulated_graph.py`) would run
but would no longer mean "this is what low-precision storage does", so the
user gets a one-line `UserError` with a way forward instead of a wrong verdict:

- FP8/FP4 tensors other than Q/DQ codes: their numerics depend on scales
  (block scaling, a Cast's saturation), not on a rounding step; the codes of
  QuantizeLinear/DequantizeLinear are run by ONNX Runtime as they are
  (`quantized_codes.py`);
- nodes of non-standard domains that read or write FP16/BF16: their kernels
  would receive FP32 stand-ins they may not accept or may treat differently;
- sparse FP16/BF16 initializers and attributes, and FP16/BF16 tensor
  attributes of ops other than `Constant`/`ConstantOfShape`: not converted;
- BF16 in a model below opset 13: `Cast` to bfloat16 does not exist there.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from trtpipe.errors import UserError
from trtpipe.numerics.rounding import LOW_PRECISION_TYPES, UNSUPPORTED_FLOAT_TYPES, precision_name
from trtpipe.numerics.tensor_types import TensorTypes

KEEP_FP32_OR_USE_ENGINE = "keep this node in FP32 with a precision rule, or validate on the TensorRT engine"


def refuse_unsupported_types(types: TensorTypes, codes: set[str] = frozenset()) -> None:
    """FP8/FP4 tensors are refused unless they are Q/DQ codes (`codes`: quantized_codes.py)."""
    found = sorted(name for name, t in types.types.items() if t in UNSUPPORTED_FLOAT_TYPES and name not in codes)
    if found:
        kinds = sorted({UNSUPPORTED_FLOAT_TYPES[types.types[name]] for name in found})
        raise UserError(
            f"the candidate model has {len(found)} {'/'.join(kinds)} tensor(s) ({', '.join(found[:5])}"
            f"{f' and {len(found) - 5} more' if len(found) > 5 else ''}) that are not QuantizeLinear outputs or "
            "DequantizeLinear inputs, which the FP16/BF16 emulation cannot reproduce",
            "validate this candidate on its TensorRT engine, or re-export the model so that its FP8/FP4 tensors "
            "are only the codes between QuantizeLinear and DequantizeLinear",
        )


def refuse_custom_low_precision(node: onnx.NodeProto, types: TensorTypes) -> None:
    touched = [name for name in [*node.input, *node.output] if types.get(name) in LOW_PRECISION_TYPES]
    if touched:
        raise UserError(
            f"node {node.name!r} ({node.domain}::{node.op_type}) uses low-precision tensors "
            f"{touched}; the emulation cannot run a custom op on FP32 stand-ins",
            KEEP_FP32_OR_USE_ENGINE,
        )


def refuse_sparse_initializers(graph: onnx.GraphProto) -> None:
    for sparse in graph.sparse_initializer:
        if sparse.values.data_type in LOW_PRECISION_TYPES:
            raise UserError(
                f"sparse initializer {sparse.values.name!r} is "
                f"{precision_name(sparse.values.data_type)}, which the emulation does not convert",
                "store it as a dense initializer (e.g. with the sanitize stage's constant folding)",
            )


def refuse_sparse_attribute(node: onnx.NodeProto, attribute: onnx.AttributeProto) -> None:
    if not attribute.HasField("sparse_tensor"):
        return
    elem_type = attribute.sparse_tensor.values.data_type
    if elem_type in LOW_PRECISION_TYPES:
        raise UserError(
            f"node {node.name!r} holds a sparse {precision_name(elem_type)} "
            "value, which the emulation does not convert",
            "fold it into a dense initializer (sanitize stage) before validation",
        )


def refuse_low_precision_tensor_attributes(node: onnx.NodeProto) -> None:
    for attribute in node.attribute:
        tensors = [attribute.t] if attribute.HasField("t") else list(attribute.tensors)
        if any(t.data_type in LOW_PRECISION_TYPES for t in tensors):
            raise UserError(
                f"node {node.name!r} ({node.op_type}) has a low-precision tensor attribute "
                f"{attribute.name!r} the emulation does not know how to convert",
                KEEP_FP32_OR_USE_ENGINE,
            )


def refuse_bf16_before_opset_13(low_type: int, node: onnx.NodeProto, opset: int) -> None:
    if low_type == TensorProto.BFLOAT16 and opset < 13:
        raise UserError(
            f"node {node.name!r} produces a bf16 tensor but the model's opset is {opset}; "
            "bf16 Casts need opset 13 or newer",
            "run the upgrade_opset stage (upgrade_opset.target=17) before precision",
        )
