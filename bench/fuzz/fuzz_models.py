"""The models and data the `fs` and `sweep` fuzz kinds run: a MatMul/Relu chain whose weights
live in external-data files written here byte for byte (so every field can be corrupted).

Decision: the external-data fields are set by hand (`location`, `offset`, `length`) rather
than by `onnx.save(save_as_external_data=True)`, so a case controls exactly what the model
says and which file the bytes sit in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


@dataclass
class Model:
    path: Path
    width: int
    weights: list[bytes]  # raw bytes of each external tensor
    locations: list[str]
    fields: list[dict] = field(default_factory=list)  # per tensor: location, offset, length as written


def build(folder: Path, rng: random.Random, tensors: int | None = None, op: str = "Relu",
          external: bool = True, name: str = "model.onnx") -> Model:
    """x[2, k] -> (MatMul w_i -> op) * n -> y, weights external (one file per tensor or shared)."""
    folder.mkdir(parents=True, exist_ok=True)
    width = rng.choice([4, 8, 16])
    count = tensors or rng.randint(1, 3)
    shared = rng.random() < 0.5
    values = np.random.default_rng(rng.randrange(2**32))
    inits, nodes, weights, locations, fields = [], [], [], [], []
    offsets: dict[str, int] = {}
    current = "x"
    for i in range(count):
        array = values.standard_normal((width, width)).astype(np.float32)
        tensor = numpy_helper.from_array(array, f"w{i}")
        raw = tensor.raw_data
        weights.append(raw)
        if external:
            location = "weights.bin" if shared else f"w{i}.bin"
            offset = offsets.get(location, 0)
            with open(folder / location, "ab") as data_file:
                data_file.write(raw)
            offsets[location] = offset + len(raw)
            fields.append({"location": location, "offset": str(offset), "length": str(len(raw))})
            set_fields(tensor, fields[-1])
            locations.append(location)
        inits.append(tensor)
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"mm{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node(op, [f"mm{i}"], [f"act{i}"], name=f"act{i}"))
        current = f"act{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "fuzz_fs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return Model(path, width, weights, locations, fields)


def set_fields(tensor: TensorProto, fields: dict) -> None:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in fields.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def rewrite_fields(model: Model, index: int, fields: dict) -> None:
    """Give tensor `index` of the saved model these external-data fields (the data files untouched)."""
    proto = onnx.load(str(model.path), load_external_data=False)
    set_fields(proto.graph.initializer[index], fields)
    model.path.write_bytes(proto.SerializeToString())
    model.fields[index] = dict(fields)


def sample_data(path: Path, width: int, seed: int) -> Path:
    """A valid .npz of sample inputs for the model above."""
    array = np.random.default_rng(seed).standard_normal((2, width)).astype(np.float32)
    np.savez(path, x=array)
    return path


def op_types(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]
