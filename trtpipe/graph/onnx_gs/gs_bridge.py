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

from trtpipe.errors import UserError
from trtpipe.onnxmodel.subgraphs import all_graphs

IR_INITIALIZERS_NEED_NOT_BE_INPUTS = 4
UNEXPORTABLE_TYPES = {"optional_type": "an optional-typed", "map_type": "a map-typed"}


def graph_from_model(model: onnx.ModelProto) -> gs.Graph:
    refuse_unexportable_io(model)
    return gs.import_onnx(model)


def refuse_unexportable_io(model: onnx.ModelProto) -> None:
    """A `UserError` for graph inputs/outputs of a type gs imports but cannot export.

    onnx-graphsurgeon (0.6.1) writes tensor, sequence and sparse-tensor graph
    inputs and outputs; an optional- or map-typed one fails inside its exporter
    with an UnboundLocalError. TensorRT accepts neither type, so the fix is the model's.
    """
    for graph in all_graphs(model.graph):
        for value in [*graph.input, *graph.output]:
            kind = value.type.WhichOneof("value")
            if kind in UNEXPORTABLE_TYPES:
                where = "the model" if graph is model.graph else f"subgraph {graph.name!r}"
                raise UserError(
                    f"{where} has {UNEXPORTABLE_TYPES[kind]} input/output {value.name!r}, which onnx-graphsurgeon "
                    f"{gs.__version__} (sanitize's cleanup and constant folding, LayerNorm fusion) cannot write",
                    "re-export the model with tensor inputs and outputs (TensorRT accepts no optional or map types)",
                )



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
    # gs never lists initializers as graph inputs, which IR 3 requires (the
    # checker rejects the model otherwise); from IR 4 on they need not be.
    model.ir_version = max(model.ir_version, source.ir_version, IR_INITIALIZERS_NEED_NOT_BE_INPUTS)
