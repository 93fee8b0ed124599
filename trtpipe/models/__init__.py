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

import functools
import importlib
from typing import TYPE_CHECKING, Callable

from trtpipe.errors import UserError
from trtpipe.models.catalog import BUILTIN_INPUT_SPECS, BUILTIN_MODEL_VERSION, BUILTIN_MODULES

if TYPE_CHECKING:
    import onnx

__all__ = ["BUILTIN_INPUT_SPECS", "BUILTIN_MODEL_VERSION", "BUILTIN_MODELS", "builtin_model"]


def _build(name: str) -> "onnx.ModelProto":
    # Imported on demand: generating needs onnx and NumPy, naming and specs do not.
    module = importlib.import_module(f"trtpipe.models.{BUILTIN_MODULES[name]}")
    return getattr(module, f"build_{name}")()


# name -> build function (the generator module is imported on the first call).
BUILTIN_MODELS: dict[str, Callable[[], "onnx.ModelProto"]] = {
    name: functools.partial(_build, name) for name in BUILTIN_MODULES
}


def builtin_model(name: str) -> "onnx.ModelProto":
    """Generate the built-in model `name`; an unknown name is a user error naming the valid ones."""
    if name not in BUILTIN_MODULES:
        valid = ", ".join(sorted(BUILTIN_MODULES))
        raise UserError(
            f"there is no built-in model named {name!r}",
            f"set model.builtin to one of {valid}, or set model.path to an ONNX file",
        )
    return BUILTIN_MODELS[name]()
