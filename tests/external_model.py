"""A small real ONNX model whose weight lives in an external data file, for file-system tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHT = "W"
DATA_OVERRIDE = "+data.inputs.x={low:0,high:1,dtype:float32}"


def weight_bytes(seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((64, 64)).astype(np.float32).tobytes()


def write_model(folder: Path, location: str = "w.bin", data: bytes | None = None, seed: int = 0,
                fields: dict[str, str] | None = None) -> Path:
    """folder/model.onnx: y = x @ W, W (64x64 float32) external at `location`; `data` (default: the
    weights of `seed`) is written at `location` when given. `fields` override the external_data
    entries as written (the location too: `data` is then still written at `location`)."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = weight_bytes(seed)
    tensor = numpy_helper.from_array(np.frombuffer(raw, np.float32).reshape(64, 64), WEIGHT)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": "0", "length": str(len(raw)), **(fields or {})}
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", WEIGHT], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    if data is not None:
        (folder / location).write_bytes(data)
    return path


def model_weights(path: Path) -> bytes:
    """The W bytes a written model holds (inline or in its own external file)."""
    model = onnx.load(str(path))
    return next(numpy_helper.to_array(t).tobytes() for t in model.graph.initializer if t.name == WEIGHT)
