"""Which graph outputs were promoted from which tensor, recorded inside the model.

A promoted FP16 tensor `t` exposed as FP32 is the output `t__fp32`; validation must
compare it with the reference's `t`. The mapping travels inside the artifact
(`metadata_props["trtpipe.promoted_outputs"]`, canonical JSON) because stages pass
files, never live objects.
"""

from __future__ import annotations

import onnx

from trtpipe.onnxmodel.json_metadata import merge_json_metadata, read_json_metadata

METADATA_KEY = "trtpipe.promoted_outputs"


def read_promoted_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """output name -> the tensor it exposes (empty when nothing was promoted)."""
    return {str(name): str(tensor) for name, tensor in read_json_metadata(model, METADATA_KEY).items()}


def record_promoted_outputs(model: onnx.ModelProto, mapping: dict[str, str]) -> None:
    merge_json_metadata(model, METADATA_KEY, mapping)
