"""The one rule for reading a tensor's dimensions: which are fixed, which are dynamic.

Exporters write a dynamic dimension in several ways: `dim_param: "batch"`
(torch.onnx with dynamic_axes), `dim_value: -1` (tf2onnx, hand-edited and
older exports), `dim_value: 0` (some converters), or a `dim` with neither
field. Every one of them means "any size".

Decisions:
- Only a positive `dim_value` is a fixed size; every other form is dynamic.
  A literal zero-sized graph input is not deployable with TensorRT (a profile
  of size 0 builds nothing useful) and is what converters write for "unknown",
  so 0 is dynamic too: sample data then needs a concrete size for it, instead
  of validating on empty arrays.
- A tensor without a `shape` field has an unknown rank (None), which is not the
  same as rank 0 (a scalar: `shape` present with no dims).
- Every reader of input shapes (sample inputs, data files, profiles, the
  network's shapes) goes through `dims`; messages show dims with `labels`
  (the dim_param name where there is one, else "?").
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx


def dim_size(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """The fixed size of one dimension, or None when it is dynamic."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None


def dims(value: onnx.ValueInfoProto | onnx.TypeProto) -> list[int | None] | None:
    """Fixed sizes (None where dynamic) of a tensor value; None when its rank is unknown."""
    tensor_type = (value.type if isinstance(value, onnx.ValueInfoProto) else value).tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [dim_size(dim) for dim in tensor_type.shape.dim]


def labels(value: onnx.ValueInfoProto | onnx.TypeProto) -> list[int | str] | None:
    """Dims for messages: the size, or the dim_param name, or "?"; None when the rank is unknown."""
    tensor_type = (value.type if isinstance(value, onnx.ValueInfoProto) else value).tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [dim_size(dim) or dim.dim_param or "?" for dim in tensor_type.shape.dim]


def is_dynamic(sizes: Sequence[int | None] | None) -> bool:
    return sizes is None or any(size is None for size in sizes)


def example_shape(sizes: Sequence[int | None], fill: int = 1) -> list[int]:
    """A concrete shape that fits `sizes`: every dynamic dimension set to `fill`."""
    return [fill if size is None else int(size) for size in sizes]


def fits(shape: Sequence[int], sizes: Sequence[int | None] | None) -> bool:
    """True when a concrete `shape` agrees with every fixed size (and the rank, when known)."""
    if sizes is None:
        return True
    return len(shape) == len(sizes) and all(size is None or size == int(got) for size, got in zip(sizes, shape))


def shape_text(shown: Sequence | None) -> str:
    if shown is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shown) + "]"


def is_placeholder_name(dim_param: str) -> bool:
    """A dim_param that names nothing: no letter or underscore ("?", "-1")."""
    return not any(c.isalpha() or c == "_" for c in dim_param)


def clear_non_positive_io_dims(model: onnx.ModelProto) -> list[str]:
    """Rewrite `dim_value <= 0` of the main graph's inputs and outputs as a dim with no field; in place.

    Decision: ONNX Runtime takes `dim_value: 0` literally (an input of batch 1 is
    refused: "Expected: 0"), while it and TensorRT's parser read an empty dim as
    dynamic. Written as what it means, the model runs everywhere with the sizes
    the sample data and profiles give. Returns "input[axis]" for each dim rewritten.

    Decision: a placeholder dim_param ("?", which Paddle2ONNX writes for every unknown
    dim) is cleared the same way. TensorRT reads dims sharing a dim_param as one size, so
    `x: [?, 3, ?, ?]` would tie height to width: the real TensorRT-RTX builder refused
    ppocr_cls with the profile min [1,3,48,192] "Input dimensions with this name have
    different constant values" (issue 23, bench/rtx/RTX.md). A real name ("batch") is a
    deliberate equality and stays.
    """
    rewritten = []
    for value in [*model.graph.input, *model.graph.output]:
        if not value.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value <= 0:
                dim.ClearField("dim_value")
                rewritten.append(f"{value.name}[{axis}]")
            elif dim.HasField("dim_param") and is_placeholder_name(dim.dim_param):
                dim.ClearField("dim_param")
                rewritten.append(f"{value.name}[{axis}]")
    return rewritten
