"""The built-in example models: what `model.builtin` names when `model.path` is unset.

Each is generated in code (no downloads, no torch), deterministically to the
byte, and reproduces one failure TensorRT users hit:

- `transformer`: BERT-like encoder at opset 13 with decomposed LayerNorms
  whose `Pow` overflows FP16, and the FP32-min attention mask constant.
- `nafnet`: NAFNet blocks at opset 17 whose channel-wise LayerNorm2d variance
  overflows FP16.
- `mixed_precision`: a hand-tuned FP16/FP32 graph with Cast chains around an
  FP32 norm, plus an untuned FP32 head.

`BUILTIN_INPUT_SPECS` describes realistic sample inputs per model and input
name, as `{"low", "high", "dtype"}`, the same shape as the `data.inputs.*`
config: integers are drawn from [low, high) (`high` exclusive, NumPy's
`integers` convention, so token ids are `{"low": 0, "high": vocab}` and the
attention mask `{"low": 0, "high": 2}`), floats uniformly from [low, high).
"""

from __future__ import annotations

from typing import Callable

import onnx

from trtpipe.errors import UserError
from trtpipe.models import mixed_precision, nafnet, transformer

# Part of every cache key that depends on a built-in model: bump it whenever a
# generator's output changes (weights, seeds, nodes, names, metadata).
BUILTIN_MODEL_VERSION = "1"

BUILTIN_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "transformer": transformer.build_transformer,
    "nafnet": nafnet.build_nafnet,
    "mixed_precision": mixed_precision.build_mixed_precision,
}

BUILTIN_INPUT_SPECS: dict[str, dict[str, dict]] = {
    "transformer": transformer.INPUT_SPECS,
    "nafnet": nafnet.INPUT_SPECS,
    "mixed_precision": mixed_precision.INPUT_SPECS,
}


def builtin_model(name: str) -> onnx.ModelProto:
    """Generate the built-in model `name`; an unknown name is a user error naming the valid ones."""
    try:
        build = BUILTIN_MODELS[name]
    except KeyError:
        valid = ", ".join(sorted(BUILTIN_MODELS))
        raise UserError(
            f"there is no built-in model named {name!r}",
            f"set model.builtin to one of {valid}, or set model.path to an ONNX file",
        ) from None
    return build()
