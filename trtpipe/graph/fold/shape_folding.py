"""graphsurgeon 0.6.1's shape folding (`fold_shape_gather`, `fold_shape_slice`, `fold_shape`), for fast_fold.py.

A Gather or Slice of a `Shape` whose input is not constant, or the Shape
itself, becomes a constant when the dims it selects are static (an int >= 0;
a `dim_param` or an unknown dim is dynamic). graphsurgeon's quirks are kept:
only the first value of Slice's starts/ends/axes/steps counts, `axes` must be
0, Gather's `axis` is not read, and a Gather index or Slice bound must already
be a constant *tensor* (an initializer, a lowered Constant or an earlier shape
fold; not an output of a foldable node). Where graphsurgeon's own code would
raise (and abandon the routine half-way), the caller gets an exception and
takes Polygraphy's pass.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from trtpipe.graph.onnx_gs.gs_export import require
from trtpipe.onnxmodel.weights_on_disk import is_on_disk

# Element types whose values are read or written here (ONNX Runtime results), with graphsurgeon's itemsize.
PLAIN_TYPES = {TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
               TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
               TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8}


class ShapeFolding:
    """Needs `constants`, `foldable`, `shape_values`, `initializers`, `lowered`, `producer`, `ops`, `ins`,
    `nodes` and `values` (fast_fold._Fold)."""

    def _producer_of(self, name: str, op_type: str) -> int | None:
        if name in self.constants or name not in self.producer:
            return None
        index = self.producer[name]
        return index if self.ops[index] == op_type else None

    def _shape_input(self, name: str) -> list | None:
        """Dims of the tensor a Shape producing `name` reads, when graphsurgeon would fold on them."""
        shape = self._producer_of(name, "Shape")
        if shape is None:
            return None
        source = self.ins[shape][0]
        if source in self.foldable:
            return None
        info = self.values.get(source)
        return None if info is None else info[1]

    def _value(self, name: str) -> np.ndarray:
        if name in self.shape_values:
            return self.shape_values[name]
        tensor = self.initializers[name] if name in self.initializers else self.lowered[name].attribute[0].t
        require(not is_on_disk(tensor) and tensor.data_type in PLAIN_TYPES, "a constant read here is not plain")
        return np.array(numpy_helper.to_array(tensor))

    def _shape_gather(self, name: str) -> np.ndarray | None:
        gather = self._producer_of(name, "Gather")
        if gather is None:
            return None
        data, indices = self.ins[gather][0], self.ins[gather][1]
        dims = self._shape_input(data)
        if dims is None or indices not in self.constants:
            return None
        values = self._value(indices)
        if not values.shape:
            dim = dims[int(values)]
            return None if dynamic_dim(dim) else np.array(dim, dtype=np.int64)
        picked = [dims[index] for index in values]
        return None if any(dynamic_dim(dim) for dim in picked) else np.array(picked, dtype=np.int64)

    def _shape_slice(self, name: str) -> np.ndarray | None:
        node = self._producer_of(name, "Slice")
        if node is None:
            return None
        inputs = self.ins[node]
        attributes = {a.name: list(a.ints) for a in self.nodes[node].attribute}
        data = inputs[0]  # graphsurgeon reads it first: a Slice without inputs raises there
        if len(inputs) >= 3:
            if not all(part in self.constants for part in inputs[1:3]):
                return None
            starts, ends = self._scalar(inputs[1]), self._scalar(inputs[2])
        elif "starts" in attributes and "ends" in attributes:
            starts, ends = attributes["starts"][0], attributes["ends"][0]
        else:
            return None
        dims = self._shape_input(data)
        if dims is None:
            return None
        if len(inputs) > 3:
            if inputs[3] not in self.constants or self._scalar(inputs[3]) != 0:
                return None
        elif "axes" in attributes and attributes["axes"][0] != 0:
            return None
        steps = 1
        if len(inputs) > 4:
            if inputs[4] not in self.constants:
                return None
            steps = self._scalar(inputs[4])
        elif "steps" in attributes:
            steps = attributes["steps"][0]
        picked = dims[starts:ends:steps]
        return None if any(dynamic_dim(dim) for dim in picked) else np.array(picked, dtype=np.int64)

    def _shape(self, name: str) -> np.ndarray | None:
        dims = self._shape_input(name)
        return None if dims is None or any(dynamic_dim(dim) for dim in dims) else np.array(dims, dtype=np.int64)

    def _scalar(self, name: str):
        values = self._value(name)
        return values if not values.shape else list(values)[0]


def dynamic_dim(dim) -> bool:
    """A dimension graphsurgeon cannot fold: a dim_param, unknown, or negative."""
    return not isinstance(dim, int) or dim < 0
