"""An FP32 compute graph that rounds every low-precision tensor the way FP16/BF16 storage does.

Why: ONNX Runtime on CPU does not run an FP16 graph faithfully. Kernels it
lacks in FP16 get Casts to FP32 around them, and redundant Cast pairs between
neighbours are removed, so a chain of FP16 ops runs in FP32 end to end; its
fusions also turn a decomposed LayerNorm into an FP32-internal kernel. Either
way the FP16 overflow that breaks the TensorRT engine never shows. The
emulation makes the rounding explicit instead:

- every tensor that is FP16 (BF16) in the original is produced in FP32 by its
  op and immediately rounded through `Cast(to=FLOAT16) -> Cast(to=FLOAT)`, so
  values above 65504 become +-inf exactly as FP16 storage makes them, while
  the op itself computes in FP32 the way GPU kernels accumulate; except an
  FP16/BF16 `LayerNormalization`, computed op by op with every intermediate
  rounded, since TensorRT's strongly typed normalization computes in its input's
  type (`low_precision_norm.py` cites the documentation);
- FP16/BF16 initializers and `Constant`/`ConstantOfShape` values become FP32
  tensors holding the identical (already rounded) values, so they need no
  rounding pair (weights on disk are widened by a Cast instead, see
  `_convert_initializers`);
- an existing `Cast(to=FLOAT16)` is kept and followed by `Cast(to=FLOAT)`:
  together they are the rounding pair (no double rounding, whatever the
  source type); `Cast(to=FLOAT)` of a low-precision tensor becomes `Identity`,
  its input already holds FP32 values; `CastLike` is first written as the
  `Cast` it stands for (the `like` tensor's original type);
- ops with an output dtype attribute (`RandomNormal`, `RandomUniform`, their
  `*Like` forms, `EyeLike`, `Bernoulli`, `SequenceEmpty`) are switched to FP32
  and their outputs rounded like any other;
- main-graph inputs that are FP16 stay FP16 (they are fed as FP16) and are
  cast to FP32 at entry; BF16 inputs, which NumPy cannot hold, are declared
  FP32 and rounded to BF16 at entry; graph outputs that are FP16 are emitted as FP32
  tensors holding the rounded values (FP32 because the rounding pair ends in
  FP32; every value is exactly representable in FP16, so `.astype(float16)`
  recovers the FP16 output bit for bit);
- integer, bool and string tensors are untouched, and so are the FP8/FP4 codes
  between QuantizeLinear and DequantizeLinear: ONNX Runtime runs the Q/DQ as they
  are, so the fake quantization is in the reference and in the candidate alike
  (`quantized_codes.py`);

Every node output keeps its original tensor name, carrying the rounded value:
the op's raw FP32 result is renamed (`<name>__trtpipe_unrounded`) instead.
That is what lets localisation compare tensors by name with the reference.

Limits (recorded here because they bound what "emulated" means):
- rounding after every op is pessimistic where TensorRT fuses a chain into one
  kernel that keeps intermediates in FP32 registers; ops that TensorRT runs
  with FP16 accumulation (rare: some explicitly requested tactics) are more
  accurate here than on the GPU;
- what cannot be emulated faithfully (FP8/FP4 tensors other than Q/DQ codes,
  custom ops on FP16 tensors, ...) is refused with a fix, see `refusals.py`;
- subgraphs (If/Loop/Scan bodies) are rewritten the same way, but only
  main-graph tensors can be exposed as intermediates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, tensor_array
from trtpipe.numerics.low_precision_norm import layernorm_in_low_precision
from trtpipe.numerics.quantized_codes import quantized_codes
from trtpipe.numerics.refusals import (
    refuse_bf16_before_opset_13,
    refuse_custom_low_precision,
    refuse_low_precision_tensor_attributes,
    refuse_sparse_attribute,
    refuse_sparse_initializers,
    refuse_unsupported_types,
)
from trtpipe.numerics.rounding import LOW_PRECISION_TYPES, precision_name
from trtpipe.numerics.tensor_types import TensorTypes, infer_tensor_types, is_float_tensor

UNROUNDED_SUFFIX = "__trtpipe_unrounded"
LOW_PRECISION_SUFFIX = "__trtpipe_lowp"
STORED_SUFFIX = "__trtpipe_stored"
ENTRY_SUFFIX = "__trtpipe_fp32"
# Ops whose `dtype` attribute names their output type.
DTYPE_ATTRIBUTE_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike",
     "Bernoulli", "SequenceEmpty"}
)
# Ops that only materialise a value from an attribute: converting the attribute
# to FP32 keeps the exact value, so no rounding pair is needed.
VALUE_ATTRIBUTE_OPS = frozenset({"Constant", "ConstantOfShape"})


@dataclass
class Emulation:
    """The emulated model and what localisation needs to map its tensors back.

    `producers`: main-graph node output -> (node name, op type) in the original.
    `precisions`: original tensor name -> precision name (`fp16`, `fp32`, `int64`, `unknown`).
    `float_tensors`: float main-graph node outputs in node order (what can be exposed).
    `notes`: decisions taken on the model's behalf (types assumed FP32, outputs kept FP16).
    """

    model: onnx.ModelProto
    producers: dict[str, tuple[str, str]]
    precisions: dict[str, str]
    float_tensors: list[str]
    notes: list[str] = field(default_factory=list)


def emulation_from_model(model: onnx.ModelProto) -> Emulation:
    """Build the FP32 compute graph described in the module docstring; `model` is not modified."""
    types = infer_tensor_types(model)
    refuse_unsupported_types(types, quantized_codes(model))
    emulated = onnx.ModelProto()
    emulated.CopyFrom(model)
    rewriter = _Rewriter(types, _default_opset(model))
    rewriter.rewrite_graph(emulated.graph, is_main=True)
    graph = model.graph
    producers = {out: (node.name, node.op_type) for node in graph.node for out in node.output if out}
    float_tensors = [
        out for node in graph.node for out in node.output if out and is_float_tensor(types, out)
    ]
    notes = [
        f"type of {name} unknown, treated as FP32 (not rounded): {why}" for name, why in types.assumed.items()
    ]
    return Emulation(
        model=emulated,
        producers=producers,
        precisions={name: precision_name(elem_type) for name, elem_type in types.types.items()},
        float_tensors=float_tensors,
        notes=notes + rewriter.notes,
    )


def _default_opset(model: onnx.ModelProto) -> int:
    return next((e.version for e in model.opset_import if e.domain in DEFAULT_DOMAINS), 1)


class _Rewriter:
    """Rewrites the graphs of one model in place, knowing its tensor types; collects notes."""

    def __init__(self, types: TensorTypes, opset: int) -> None:
        self.types = types
        self.opset = opset
        self.notes: list[str] = []

    def rewrite_graph(self, graph: onnx.GraphProto, *, is_main: bool) -> None:
        # Decision: value_info is dropped, not patched: its FP16 entries would
        # contradict the FP32 tensors, and ONNX Runtime infers what it needs.
        del graph.value_info[:]
        widened = self._convert_initializers(graph)
        entry_casts = self._convert_inputs(graph, is_main)
        self._convert_outputs(graph, is_main)
        nodes = widened + list(entry_casts)
        for node in graph.node:
            self._rewrite_subgraphs(node)
            nodes.extend(self._rewrite_node(node))
        del graph.node[:]
        graph.node.extend(nodes)

    def _convert_initializers(self, graph: onnx.GraphProto) -> list[onnx.NodeProto]:
        """Low-precision initializers as FP32 values; returns the Casts that widen on-disk ones.

        Decision: a weight on disk (a large model, `trtpipe/onnxmodel/weights_on_disk.py`) stays
        in its file in its own type, renamed `<name>__trtpipe_stored`, and a
        `Cast(to=FLOAT)` at the top of the graph produces `<name>`: the same exact
        FP32 values, computed by ONNX Runtime per run, instead of an FP32 copy of
        every weight in memory (twice the size of the FP16 model).
        """
        graph_inputs = {value.name for value in graph.input}
        widened = []
        for index, tensor in enumerate(graph.initializer):
            if tensor.data_type not in LOW_PRECISION_TYPES:
                continue
            if is_on_disk(tensor) and tensor.name not in graph_inputs:
                stored = tensor.name + STORED_SUFFIX
                widened.append(helper.make_node("Cast", [stored], [tensor.name], name=f"{stored}/to_fp32",
                                                to=TensorProto.FLOAT))
                graph.initializer[index].name = stored
            else:
                graph.initializer[index].CopyFrom(_as_fp32_tensor(tensor))
        refuse_sparse_initializers(graph)
        return widened

    def _convert_inputs(self, graph: onnx.GraphProto, is_main: bool) -> list[onnx.NodeProto]:
        """Main graph: FP16 inputs are cast to FP32 at entry, BF16 ones rounded; subgraphs: declared FP32."""
        initializers = {tensor.name for tensor in graph.initializer}
        entry_casts = []
        for value in graph.input:
            elem_type = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
            if elem_type not in LOW_PRECISION_TYPES or value.name in initializers:
                continue
            if not is_main:
                value.type.tensor_type.elem_type = TensorProto.FLOAT
                continue
            entry = value.name + ENTRY_SUFFIX
            _rename_uses(graph, value.name, entry)
            source = value.name
            if elem_type == TensorProto.BFLOAT16:
                # NumPy has no bfloat16 to feed: the input is declared FP32 and
                # rounded to BF16 at entry, as storing it in BF16 would.
                value.type.tensor_type.elem_type = TensorProto.FLOAT
                source = value.name + LOW_PRECISION_SUFFIX
                entry_casts.append(helper.make_node("Cast", [value.name], [source], to=elem_type,
                                                    name=f"trtpipe_entry/{value.name}/round"))
            entry_casts.append(
                helper.make_node("Cast", [source], [entry], name=f"trtpipe_entry/{value.name}",
                                 to=TensorProto.FLOAT)
            )
        return entry_casts

    def _convert_outputs(self, graph: onnx.GraphProto, is_main: bool) -> None:
        fed = {value.name for value in graph.input} if is_main else set()
        for value in graph.output:
            if not value.type.HasField("tensor_type"):
                continue
            if value.type.tensor_type.elem_type in LOW_PRECISION_TYPES:
                if value.name in fed:
                    self.notes.append(f"output {value.name} is the graph input itself: kept in its own type")
                    continue
                value.type.tensor_type.elem_type = TensorProto.FLOAT

    def _rewrite_subgraphs(self, node: onnx.NodeProto) -> None:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                self.rewrite_graph(attribute.g, is_main=False)
            for subgraph in attribute.graphs:
                self.rewrite_graph(subgraph, is_main=False)

    def _rewrite_node(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The node(s) that replace `node` in the emulated graph."""
        if node.domain not in DEFAULT_DOMAINS:
            refuse_custom_low_precision(node, self.types)
            return [node]
        if node.op_type in VALUE_ATTRIBUTE_OPS:
            _convert_tensor_attributes(node)
            return [node]
        if node.op_type == "CastLike":
            node = self._cast_from_cast_like(node)
        if node.op_type == "Cast":
            return self._rewrite_cast(node)
        if node.op_type in DTYPE_ATTRIBUTE_OPS:
            for attribute in node.attribute:
                if attribute.name == "dtype" and attribute.i in LOW_PRECISION_TYPES:
                    attribute.i = TensorProto.FLOAT
        refuse_low_precision_tensor_attributes(node)
        if node.op_type == "LayerNormalization" and self.types.get(node.output[0]) in LOW_PRECISION_TYPES:
            # TensorRT's strongly typed normalization computes in its input's type (X and Y share
            # the type T; X may be renamed at entry already): low_precision_norm.py.
            replaced = layernorm_in_low_precision(node, self.types.get(node.output[0]), self.opset,
                                                  self._rank(node.input[0]), UNROUNDED_SUFFIX)
            if replaced is not None:
                return replaced
            self.notes.append(f"LayerNormalization {node.name!r}: statistics computed in FP32 (axis >= 0 of "
                              "unknown rank, or Mean/InvStdDev outputs): the emulation may be optimistic")
        return [node, *self._round_outputs(node)]

    def _rank(self, name: str) -> int | None:
        """The rank shape inference gave `name` (or the graph input it enters as, `<name>__trtpipe_fp32`)."""
        return self.types.ranks.get(name.removesuffix(ENTRY_SUFFIX))

    def _rewrite_cast(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        to = next(a.i for a in node.attribute if a.name == "to")
        if to in LOW_PRECISION_TYPES:
            refuse_bf16_before_opset_13(to, node, self.opset)
            rounded = node.output[0]
            node.output[0] = rounded + LOW_PRECISION_SUFFIX
            back = helper.make_node("Cast", [node.output[0]], [rounded], to=TensorProto.FLOAT,
                                    name=f"{node.name}/trtpipe_to_fp32")
            return [node, back]
        if to == TensorProto.FLOAT and self.types.get(node.input[0]) in LOW_PRECISION_TYPES:
            return [helper.make_node("Identity", list(node.input), list(node.output), name=node.name)]
        return [node]

    def _cast_from_cast_like(self, node: onnx.NodeProto) -> onnx.NodeProto:
        """`CastLike(x, like)` is `Cast(x, to=<like's original type>)`."""
        target = self.types.get(node.input[1])
        if not target:
            self.notes.append(f"CastLike {node.name!r}: type of {node.input[1]} unknown, left as CastLike")
            return node
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return helper.make_node("Cast", [node.input[0]], list(node.output), name=node.name, to=target,
                                **attributes)

    def _round_outputs(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """Rename each low-precision output and produce the original name through a rounding pair."""
        pairs = []
        for index, name in enumerate(node.output):
            low_type = self.types.get(name)
            if not name or low_type not in LOW_PRECISION_TYPES:
                continue
            refuse_bf16_before_opset_13(low_type, node, self.opset)
            unrounded, low = name + UNROUNDED_SUFFIX, name + LOW_PRECISION_SUFFIX
            node.output[index] = unrounded
            tag = f"{node.name}/trtpipe_round_{LOW_PRECISION_TYPES[low_type]}_{index}"
            pairs.append(helper.make_node("Cast", [unrounded], [low], name=f"{tag}/down", to=low_type))
            pairs.append(helper.make_node("Cast", [low], [name], name=f"{tag}/up", to=TensorProto.FLOAT))
        return pairs


def _as_fp32_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The same values as FP32 (exact: every FP16/BF16 value is an FP32 value)."""
    values = tensor_array(tensor).astype(np.float32)
    converted = numpy_helper.from_array(values, tensor.name)
    converted.doc_string = tensor.doc_string
    return converted


def _convert_tensor_attributes(node: onnx.NodeProto) -> None:
    for attribute in node.attribute:
        if attribute.HasField("t") and attribute.t.data_type in LOW_PRECISION_TYPES:
            attribute.t.CopyFrom(_as_fp32_tensor(attribute.t))
        refuse_sparse_attribute(node, attribute)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Point every consumer of `old` (in `graph` and its subgraphs) at `new`; outputs keep `old`."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name == old:
                node.input[index] = new
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            for subgraph in subgraphs:
                _rename_uses(subgraph, old, new)
