"""Round trip through onnx-graphsurgeon without losing model-level fields.

`gs.export_onnx` rebuilds the ModelProto from the graph and drops what lives
outside it: `metadata_props` (where trtpipe records absorbed node names),
the model `doc_string`, `domain` and `model_version`. Polygraphy's loaders go
through the same export. Every pass that edits with onnx-graphsurgeon returns
its model through `model_from_graph`, or calls `restore_model_fields`.
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs


def graph_from_model(model: onnx.ModelProto) -> gs.Graph:
    return gs.import_onnx(model)


def model_from_graph(graph: gs.Graph, like: onnx.ModelProto) -> onnx.ModelProto:
    """Export `graph`; model-level fields are taken from `like`."""
    # do_type_check=False: tensors of custom ops may have no type, which is legal ONNX.
    model = gs.export_onnx(graph, do_type_check=False)
    restore_model_fields(model, like)
    return model


def restore_model_fields(model: onnx.ModelProto, source: onnx.ModelProto) -> None:
    """Copy the fields gs drops from `source` into `model`, in place."""
    if model is source:
        return
    del model.metadata_props[:]
    model.metadata_props.extend(source.metadata_props)
    model.doc_string = source.doc_string
    model.domain = source.domain
    model.model_version = source.model_version
    # gs keeps ir_version, but export falls back to onnx's newest IR when the
    # graph has none; never lower what the source model declared.
    model.ir_version = max(model.ir_version, source.ir_version)
