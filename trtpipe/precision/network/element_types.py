"""The float element types precision control works with, and their names in plans and reports.

Decisions:
- Only FLOAT, FLOAT16 and BFLOAT16 tensors are ever retyped (`RETYPABLE`).
  DOUBLE paths are left exactly as they are: nothing in TensorRT runs them, and
  an "fp32" plan must not quietly narrow a model's deliberate float64 maths.
  Integer, bool and shape tensors are never touched at all.
- A Cast is value-preserving (`is_lossless`) only when every value of the
  source type is exactly representable in the target type: fp16 -> fp32,
  bf16 -> fp32, any of them -> fp64, and a type to itself. Only such Casts may
  be looked through (see casts.py); fp16 <-> bf16 loses bits both ways.
"""

from __future__ import annotations

from onnx import TensorProto

PRECISION_ELEMENT_TYPES: dict[str, int] = {
    "fp32": TensorProto.FLOAT,
    "fp16": TensorProto.FLOAT16,
    "bf16": TensorProto.BFLOAT16,
}
KEEP = "keep"
VALID_PRECISIONS = (*PRECISION_ELEMENT_TYPES, KEEP)

RETYPABLE = frozenset(PRECISION_ELEMENT_TYPES.values())
LOW_PRECISION = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})

_SHORT_NAMES = {
    TensorProto.FLOAT: "fp32",
    TensorProto.FLOAT16: "fp16",
    TensorProto.BFLOAT16: "bf16",
    TensorProto.DOUBLE: "fp64",
}

_LOSSLESS = frozenset(
    {
        (TensorProto.FLOAT16, TensorProto.FLOAT),
        (TensorProto.BFLOAT16, TensorProto.FLOAT),
        (TensorProto.FLOAT16, TensorProto.DOUBLE),
        (TensorProto.BFLOAT16, TensorProto.DOUBLE),
        (TensorProto.FLOAT, TensorProto.DOUBLE),
    }
)

# Schema type strings ("tensor(float16)") -> element types, for type constraints.
_SCHEMA_TYPE_NAMES = {
    "float": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "double": TensorProto.DOUBLE,
}


def short_name(elem_type: int) -> str:
    """'fp16', 'fp32', ... for reports and generated tensor names; ONNX's own name otherwise."""
    if elem_type in _SHORT_NAMES:
        return _SHORT_NAMES[elem_type]
    return TensorProto.DataType.Name(elem_type).lower()


def is_lossless(source: int, target: int) -> bool:
    """True when casting `source` to `target` keeps every value exactly."""
    return source == target or (source, target) in _LOSSLESS


def element_type_of_schema_type(type_str: str) -> int | None:
    """`tensor(float16)` -> FLOAT16; None for non-float, sequence, optional or map types."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    return _SCHEMA_TYPE_NAMES.get(type_str[len("tensor(") : -1])


def schema_type_name(elem_type: int) -> str:
    """FLOAT16 -> `tensor(float16)`, as ONNX schemas spell it (for reasons in reports)."""
    for name, value in _SCHEMA_TYPE_NAMES.items():
        if value == elem_type:
            return f"tensor({name})"
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
