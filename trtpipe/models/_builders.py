"""Shared pieces for writing the built-in example models as exporter-style ONNX.

The built-in models must look like what `torch.onnx.export` produces, because
the failures they demonstrate (and the names users write precision rules
against) come from exported graphs. `GraphBuilder` therefore names things the
way the exporter does:

- a node is `<module scope>/<OpType>`, e.g. `/encoder/layer.0/attention/self/MatMul`;
  a second node of the same type in the same scope gets `_1`, `_2`, ...
  (`/encoder/layer.0/attention/self/MatMul_1`);
- a node's outputs are `<node name>_output_<i>`;
- scalar constants are `Constant` nodes in the scope that uses them.

Decisions:
- Everything is appended in call order and nothing reads a clock or an
  unseeded source, so `build_x().SerializeToString()` is byte-identical across
  calls and processes.
- Weights come from `np.random.RandomState`, not `np.random.default_rng`:
  NumPy freezes the legacy RandomState stream across releases (NEP 19), while a
  `Generator`'s stream may change between versions. A model that silently
  changed with a NumPy upgrade would defeat the cache keys built from
  `BUILTIN_MODEL_VERSION`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.graph.names.parser_names import unique_name

# Fixed metadata: part of what makes the serialised bytes reproducible.
PRODUCER_NAME = "trtpipe"
# IR 8 (onnx 1.10-1.12) covers every opset up to 17, the newest the built-in
# models use; older readers (ONNX Runtime, TensorRT 8.6+ parsers) accept it.
IR_VERSION = 8


def seeded_rng(seed: int) -> np.random.RandomState:
    """A random source whose stream NumPy keeps stable across versions (see module doc)."""
    return np.random.RandomState(seed)


def tensor_info(name: str, elem_type: int, shape: list[int]) -> onnx.ValueInfoProto:
    """A graph input/output declaration with a fully static shape."""
    return helper.make_tensor_value_info(name, elem_type, shape)


class GraphBuilder:
    """Collects nodes and initializers, naming them like `torch.onnx.export`."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._used_node_names: set[str] = set()
        self._used_initializer_names: set[str] = set()

    def initializer(self, name: str, array: np.ndarray) -> str:
        """Register a weight under its parameter name and return that name."""
        if name in self._used_initializer_names:
            raise ValueError(f"initializer {name!r} is defined twice")
        self._used_initializer_names.add(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def constant(self, scope: str, value: np.ndarray) -> str:
        """A `Constant` node in `scope` (how the exporter emits literals like 2.0 or eps)."""
        tensor = numpy_helper.from_array(np.asarray(value))
        return self.node("Constant", scope, [], value=tensor)

    def node(
        self,
        op_type: str,
        scope: str,
        inputs: list[str],
        num_outputs: int = 1,
        output_names: list[str] | None = None,
        **attributes,
    ):
        """Append `<scope>/<op_type>[_k]` and return its output name (a list if several).

        `output_names` overrides the exporter-style names; it is used only for
        the graph outputs, whose names are part of the model's interface.
        """
        name = self._unique_node_name(f"{scope}/{op_type}")
        outputs = output_names or [f"{name}_output_{i}" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attributes))
        return outputs[0] if len(outputs) == 1 else outputs

    def model(
        self,
        graph_name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        opset: int,
        doc_string: str,
    ) -> onnx.ModelProto:
        """Assemble the model with the fixed metadata that keeps its bytes reproducible."""
        graph = helper.make_graph(
            self.nodes, graph_name, inputs, outputs, self.initializers, doc_string=doc_string
        )
        return helper.make_model(
            graph,
            producer_name=PRODUCER_NAME,
            ir_version=IR_VERSION,
            opset_imports=[helper.make_opsetid("", opset)],
        )

    def rename_tensor(self, old: str, new: str) -> None:
        """Give a tensor its public name, e.g. make a LayerNorm's output `last_hidden_state`.

        The exporter names a graph output after the model's return value, not
        after the node that computes it; renaming afterwards keeps the helpers
        that build the node unaware of whether their result is public.
        """
        for node in self.nodes:
            node.input[:] = [new if name == old else name for name in node.input]
            node.output[:] = [new if name == old else name for name in node.output]

    def _unique_node_name(self, base: str) -> str:
        # The exporter's rule, which is also the parser's: the first node keeps the bare
        # name, later ones get `_1`, `_2`, ... in the order they are created.
        name = unique_name(base, self._used_node_names)
        self._used_node_names.add(name)
        return name


def add_decomposed_layer_norm(
    builder: GraphBuilder,
    scope: str,
    x: str,
    weight: str,
    bias: str,
    axis: int,
    eps: float,
) -> str:
    """LayerNorm spelled out the way the exporter writes it before opset 17.

    ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul -> Add.
    `axis` is -1 for a Transformer's LayerNorm and 1 for NAFNet's channel-wise
    LayerNorm2d. The Pow output (and the second ReduceMean) is the tensor that
    overflows FP16 when deviations from the mean exceed 256 (256**2 > 65504);
    it is left as a separate node on purpose, since that is the pattern
    `upgrade_opset` fuses and `precision` has to protect.
    """
    mean = builder.node("ReduceMean", scope, [x], axes=[axis], keepdims=1)
    centred = builder.node("Sub", scope, [x, mean])
    two = builder.constant(scope, np.array(2.0, dtype=np.float32))
    squared = builder.node("Pow", scope, [centred, two])
    variance = builder.node("ReduceMean", scope, [squared], axes=[axis], keepdims=1)
    epsilon = builder.constant(scope, np.array(eps, dtype=np.float32))
    shifted = builder.node("Add", scope, [variance, epsilon])
    std = builder.node("Sqrt", scope, [shifted])
    normalised = builder.node("Div", scope, [centred, std])
    scaled = builder.node("Mul", scope, [normalised, weight])
    return builder.node("Add", scope, [scaled, bias])


def module_scope(qualified_name: str, module_lists: tuple[str, ...] = ()) -> str:
    """The scope `torch.onnx.export` gives the nodes of the module `qualified_name`.

    Every module on the path that is *called* contributes one component: its
    qualified name from the last non-numeric part on (torch's
    `_unqualified_variable_name`), so `encoder.layer.0.attention.self.query`
    gives `/encoder/layer.0/attention/self/query` and `encoders.0.0.sca.1`
    gives `/encoders.0/encoders.0.0/sca/sca.1`. An `nn.ModuleList` is never
    called, so it contributes nothing; it cannot be told apart from an
    `nn.Sequential` by name, hence the explicit `module_lists`.
    """
    atoms = qualified_name.split(".")
    components = []
    for end in range(1, len(atoms) + 1):
        prefix = atoms[:end]
        if ".".join(prefix) in module_lists:
            continue
        last_named = max(i for i, atom in enumerate(prefix) if not atom.isdigit())
        components.append(".".join(prefix[last_named:]))
    return "/" + "/".join(components)


def add_tanh_gelu(builder: GraphBuilder, scope: str, x: str) -> str:
    """Hugging Face's `gelu_new`/`gelu_pytorch_tanh` as exported, in the exporter's order.

    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): Mul, Pow(3), Mul, Add, Mul,
    Tanh, Add, Mul. `Pow(x, 3)` exceeds FP16's 65504 once |x| > 40.
    """
    def const(value: float) -> str:
        return builder.constant(scope, np.array(value, dtype=np.float32))

    half = builder.node("Mul", scope, [const(0.5), x])
    cube = builder.node("Pow", scope, [x, const(3.0)])
    cube = builder.node("Mul", scope, [const(0.044715), cube])
    inner = builder.node("Add", scope, [x, cube])
    inner = builder.node("Mul", scope, [const(float(np.sqrt(2.0 / np.pi))), inner])
    tanh = builder.node("Tanh", scope, [inner])
    shifted = builder.node("Add", scope, [const(1.0), tanh])
    return builder.node("Mul", scope, [half, shifted])
