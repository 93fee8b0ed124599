"""Which original nodes a fused node absorbed, recorded inside the model.

A precision rule may name a node that a fusion removed (the user wrote the
rule against the exported model). The fusion records, in the model's
`metadata_props` under `trtpipe.absorbed_nodes`, the mapping
`{fused node name: [absorbed node names in topological order]}` so the
precision stage can resolve such a rule to the fused node and say so.

Decision (json_metadata.py): canonical JSON so the same fusion gives the
same bytes; entries already present are kept and merged, because several
passes (or several runs of one pass) may fuse.
"""

from __future__ import annotations

import onnx

from trtpipe.onnxmodel.json_metadata import merge_json_metadata, read_json_metadata

METADATA_KEY = "trtpipe.absorbed_nodes"


def read_absorbed_nodes(model: onnx.ModelProto) -> dict[str, list[str]]:
    """The recorded mapping (empty when there is none)."""
    mapping = read_json_metadata(model, METADATA_KEY)
    return {str(name): [str(n) for n in absorbed] for name, absorbed in mapping.items()}


def record_absorbed_nodes(model: onnx.ModelProto, fused: dict[str, list[str]]) -> None:
    """Merge `fused` into the model's mapping, in place (one metadata entry, canonical JSON)."""
    merge_json_metadata(model, METADATA_KEY, fused)
