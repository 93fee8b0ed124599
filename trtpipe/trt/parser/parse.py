"""Parse an ONNX model into a TensorRT network (no build) and list its layers.

Used to check precision rules against the network TensorRT really builds: a node the
ONNX parser constant-folds or absorbs produces no layer, so a rule naming it has no
effect in the engine.

API facts (checked as for builder.py): Polygraphy's `NetworkFromOnnxPath(path,
strongly_typed=...)` returns `(builder, network, parser)` when called
(polygraphy/backend/trt/loader.py); `INetworkDefinition.num_layers`,
`get_layer(i)`, `ILayer.name` and `ILayer.metadata` (TensorRT 10+, pyGraph.cpp;
the parser writes `[ONNX Layer: <node>]` there).
"""

from __future__ import annotations

from pathlib import Path


def parsed_layers(onnx_path: Path) -> list[tuple[str, str | None]]:
    """(layer name, metadata) of every layer TensorRT's ONNX parser creates for the model."""
    import tensorrt as trt  # the seam: imported only when TensorRT is actually used
    from polygraphy.backend.trt import NetworkFromOnnxPath

    strongly_typed = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    builder, network, parser = NetworkFromOnnxPath(str(onnx_path), strongly_typed=strongly_typed)()
    layers = []
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        layers.append((layer.name, getattr(layer, "metadata", None) or None))
    del builder, parser
    return layers
