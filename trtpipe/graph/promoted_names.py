"""Which graph outputs were promoted from which tensor, recorded inside the model.

A promoted FP16 tensor `t` exposed as FP32 is the output `t__fp32`; validation must
compare it with the reference's `t`. The mapping travels inside the artifact
(`metadata_props["trtpipe.promoted_outputs"]`, canonical JSON) because stages pass
files, never live objects.
"""

from __future__ import annotations

import json

import onnx

METADATA_KEY = "trtpipe.promoted_outputs"


def read_promoted_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """output name -> the tensor it exposes (empty when nothing was promoted)."""
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            return dict(json.loads(entry.value))
    return {}


def record_promoted_outputs(model: onnx.ModelProto, mapping: dict[str, str]) -> None:
    merged = {**read_promoted_outputs(model), **mapping}
    kept = [(e.key, e.value) for e in model.metadata_props if e.key != METADATA_KEY]
    del model.metadata_props[:]
    for key, value in kept:
        model.metadata_props.add(key=key, value=value)
    if merged:
        model.metadata_props.add(key=METADATA_KEY, value=json.dumps(merged, sort_keys=True, separators=(",", ":")))
