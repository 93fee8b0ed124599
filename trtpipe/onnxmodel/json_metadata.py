"""A JSON object stored in a model's `metadata_props`, read and merged the same way everywhere.

Decision: canonical JSON (sorted keys, no spaces, UTF-8 as is) so the same mapping
gives the same bytes; an entry that is not a JSON object is a `UserError` naming it.
"""

from __future__ import annotations

import json

import onnx

from trtpipe.errors import UserError


def read_json_metadata(model: onnx.ModelProto, key: str) -> dict:
    """The object stored under `key` (empty when there is none)."""
    for entry in model.metadata_props:
        if entry.key == key:
            try:
                mapping = json.loads(entry.value)
            except json.JSONDecodeError:
                mapping = None
            if not isinstance(mapping, dict):
                raise UserError(
                    f"model metadata {key} is not a JSON object",
                    f"remove the {key} metadata entry or re-run the pipeline from the exported model",
                )
            return mapping
    return {}


def merge_json_metadata(model: onnx.ModelProto, key: str, mapping: dict) -> None:
    """Merge `mapping` into the object under `key`, in place; other entries keep their order."""
    if not mapping:
        return
    merged = {**read_json_metadata(model, key), **mapping}
    kept = [(entry.key, entry.value) for entry in model.metadata_props if entry.key != key]
    del model.metadata_props[:]
    for other, value in kept:
        model.metadata_props.add(key=other, value=value)
    model.metadata_props.add(key=key, value=json.dumps(merged, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False))
