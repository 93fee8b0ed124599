"""Which original nodes a fused node absorbed, recorded inside the model.

A precision rule may name a node that a fusion removed (the user wrote the
rule against the exported model). The fusion records, in the model's
`metadata_props` under `trtpipe.absorbed_nodes`, the mapping
`{fused node name: [absorbed node names in topological order]}` so the
precision stage can resolve such a rule to the fused node and say so.

Decision: canonical JSON (sorted keys, no spaces) so the same fusion gives the
same bytes; entries already present are kept and merged, because several
passes (or several runs of one pass) may fuse.
"""

from __future__ import annotations

import json

import onnx

from trtpipe.errors import UserError

METADATA_KEY = "trtpipe.absorbed_nodes"


def read_absorbed_nodes(model: onnx.ModelProto) -> dict[str, list[str]]:
    """The recorded mapping (empty when there is none)."""
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            try:
                mapping = json.loads(entry.value)
            except json.JSONDecodeError:
                mapping = None
            if not isinstance(mapping, dict):
                raise UserError(
                    f"model metadata {METADATA_KEY} is not a JSON object",
                    f"remove the {METADATA_KEY} metadata entry or re-run the pipeline from the exported model",
                )
            return {str(name): [str(n) for n in absorbed] for name, absorbed in mapping.items()}
    return {}


def record_absorbed_nodes(model: onnx.ModelProto, fused: dict[str, list[str]]) -> None:
    """Merge `fused` into the model's mapping, in place (one metadata entry, canonical JSON)."""
    if not fused:
        return
    mapping = read_absorbed_nodes(model)
    mapping.update(fused)
    text = json.dumps(mapping, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    others = [entry for entry in model.metadata_props if entry.key != METADATA_KEY]
    kept = [(entry.key, entry.value) for entry in others]
    del model.metadata_props[:]
    for key, value in kept:
        model.metadata_props.add(key=key, value=value)
    model.metadata_props.add(key=METADATA_KEY, value=text)
