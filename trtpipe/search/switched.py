"""One emulated graph for every trial of the search: rounding points switched by boolean inputs.

Why: a trial used to build a new emulated graph and a new ONNX Runtime session
for its plan (half of a trial's time on the built-in t5). What changes between
two plans is only *where* values are rounded to FP16: the emulation of a
materialised candidate is the FP32 graph with every FP16 tensor rounded once,
where it is produced (an FP16 node's outputs) or where it is read (the Cast
or converted weight in front of an FP16 node's input). So the graph is built
once with a switch at every such point of every node:

    x -> Where(switch, Cast(Cast(x, to=FLOAT16), to=FLOAT), x) -> the node's input i
    node -> raw -> Where(switch, Cast(Cast(raw, FLOAT16), FLOAT), raw) -> its output j

and a trial feeds the switches. Which switches are on is read from the
materialised candidate of the plan (materialisation stays per trial; it also
counts the Casts): an input slot is rounded when the candidate's node reads
an FP16 tensor there, an output when the candidate produces it in FP16.
Rounding twice is rounding once, so a value rounded at production and again
at a consumer is what the candidate computes. The rounding pair is the
emulator's own (`emulated_graph.py`), so the values are bit for bit those of
`EmulatedRunner` on the candidate (tested on the built-in models).

Decisions (where the equivalence is not certain, the trial uses the full
emulation instead, and says so in the log):
- built only for FP16 with graph I/O kept FP32, on models with no
  low-precision tensor as authored, no subgraph and only standard-domain ops;
- a candidate is mapped only when every original node is there under its name
  with the same op and inputs, every other node is a Cast, attributes differ
  only where a value is retyped (`Cast`, `Constant`, `ConstantOfShape`), every
  switched tensor's type is known, and no weight was saturated (a weight
  clipped to 65504 is not what a Cast to FP16 gives);
- an absent optional input (an empty name) and a constant with no element (the
  empty `roi`/`scales` exporters write for a `Resize` by `sizes`) get no switch:
  there is nothing to round, and a rounding `Where` in front of an empty constant
  hides that it is empty from ONNX's shape inference, which then sees both
  `scales` and `sizes` given and refuses the graph ("Either `sizes` or `scales`
  must be provided, but not both of them"). Empty stays empty, as in the model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe.numerics.ort_session import OrtSession
from trtpipe.precision.materialize.materialize import authored_element_types

PREFIX = "__trtpipe_switch"
RETYPED_VALUE_OPS = frozenset({"Cast", "Constant", "ConstantOfShape"})
LOW_TYPES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def why_not_switched(model: onnx.ModelProto, low_precision: str, keep_io_types: bool) -> str | None:
    """None when `SwitchedEmulation` applies to `model`, else the reason."""
    if low_precision != "fp16":
        return f"low precision is {low_precision}"
    if not keep_io_types:
        return "precision.keep_io_types is false"
    if any(t in LOW_TYPES for t in authored_element_types(model).values()):
        return "the model holds low-precision tensors as authored"
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            return f"node {node.name} is a {node.domain} op"
        if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute):
            return f"node {node.name} has a subgraph"
    return None


class SwitchedEmulation:
    def __init__(self, model: onnx.ModelProto) -> None:
        """`model`: the FP32 model the search materialises its plans from (see `why_not_switched`)."""
        types = authored_element_types(model)
        empty = empty_constants(model.graph)
        self._original = {node.name: node for node in model.graph.node}
        self.inputs: dict[tuple[str, int], str] = {}  # (node, input slot) -> switch
        self.outputs: dict[tuple[str, int], str] = {}  # (node, output slot) -> switch
        switched = onnx.ModelProto()
        switched.CopyFrom(model)
        graph = switched.graph
        nodes = []
        for index, node in enumerate(model.graph.node):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            for slot, name in enumerate(node.input):
                if name and name not in empty and types.get(name) == TensorProto.FLOAT:
                    switch = f"{PREFIX}_in_{index}_{slot}"
                    self.inputs[(node.name, slot)] = switch
                    copy.input[slot] = _rounding(nodes, name, f"{switch}_value", switch)
            after = []
            for slot, name in enumerate(node.output):
                if name and types.get(name) == TensorProto.FLOAT:
                    switch = f"{PREFIX}_out_{index}_{slot}"
                    self.outputs[(node.name, slot)] = switch
                    copy.output[slot] = f"{switch}_raw"
                    _rounding(after, copy.output[slot], name, switch)
            nodes += [copy, *after]
        del graph.node[:]
        graph.node.extend(nodes)
        del graph.value_info[:]
        graph.input.extend(helper.make_tensor_value_info(switch, TensorProto.BOOL, [])
                           for switch in [*self.inputs.values(), *self.outputs.values()])
        self.graph_outputs = [value.name for value in model.graph.output]
        self._session = OrtSession(switched, graph="the search's switched emulation graph (switched.py)")

    def switches(self, candidate: onnx.ModelProto, report: dict) -> dict[str, np.ndarray] | None:
        """The switch values that make this graph compute `candidate`; None when it cannot be
        mapped (see the module docstring)."""
        if report.get("saturated"):
            return None
        graph = candidate.graph
        types = {value.name: value.type.tensor_type.elem_type for value in [*graph.input, *graph.output,
                                                                            *graph.value_info]}
        types.update({tensor.name: tensor.data_type for tensor in graph.initializer})
        by_name: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            if node.name in self._original:
                if node.name in by_name:
                    return None
                by_name[node.name] = node
            elif node.op_type != "Cast":
                return None
        if len(by_name) != len(self._original):
            return None
        values: dict[str, np.ndarray] = {}
        for name, original in self._original.items():
            node = by_name[name]
            if node.op_type != original.op_type or len(node.input) != len(original.input) \
                    or len(node.output) != len(original.output):
                return None
            if node.op_type not in RETYPED_VALUE_OPS and list(node.attribute) != list(original.attribute):
                return None
            for kind, tensors, switches in (("in", node.input, self.inputs), ("out", node.output, self.outputs)):
                for slot, tensor in enumerate(tensors):
                    switch = switches.get((name, slot))
                    if switch is None:
                        continue
                    if tensor not in types:
                        return None
                    values[switch] = np.array(types[tensor] == TensorProto.FLOAT16)
        return values

    def run(self, feeds: dict[str, np.ndarray], switches: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self._session.run({**feeds, **switches})
        return {name: results[name] for name in self.graph_outputs}


def empty_constants(graph: onnx.GraphProto) -> set[str]:
    """Initializers and `Constant` outputs with no element: an unused optional input given as a tensor."""
    found = {tensor.name for tensor in graph.initializer if 0 in tensor.dims}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None and 0 in value.dims:
                found.update(node.output)
    return found


def _rounding(nodes: list, source: str, target: str, switch: str) -> str:
    """Append `target = Where(switch, round_fp16(source), source)`; returns `target`."""
    low = helper.make_node("Cast", [source], [f"{target}_fp16"], name=f"{target}_to_fp16", to=TensorProto.FLOAT16)
    back = helper.make_node("Cast", [low.output[0]], [f"{target}_rounded"], name=f"{target}_to_fp32",
                            to=TensorProto.FLOAT)
    pick = helper.make_node("Where", [switch, back.output[0], source], [target], name=f"{target}_switch")
    nodes += [low, back, pick]
    return target
