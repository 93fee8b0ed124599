"""A small pattern language for graph fusions, in the style of the onnxscript rewriter.

A pattern is a plain function that spells out the math with a builder `op`:

    def pattern(op, x, eps):
        mean = op.ReduceMean(x, _label="mean")
        ...
        return op.Div(centered, std, _label="normalize")

`Pattern.trace` runs it once to record the op tree; `match` then checks one
onnx-graphsurgeon node (or its `proto_view` counterpart) against the tree, walking from the pattern's root
towards its inputs. What the matcher decides, and why:

- An op matches a node of the same op type in the default domain, or of one of
  its `_or` alternatives (`op.ReduceMean(x, _or=("GlobalAveragePool",))`: the
  same math written by another op, as tf2onnx writes a mean over [2, rank)); the node
  may have more inputs than the pattern names (ReduceMean's `axes` input at
  opset 18 is read by the rule's `check`, not by the pattern).
- `Add` and `Mul` are commutative: both input orders are tried.
- A parameter of the pattern function (`x`, `eps`) binds to any tensor; used
  twice, it must bind to the same tensor both times.
- One op object used twice (`centered` feeds Pow and Div) must be the same
  node both times: that is what makes a DAG, not a tree, match.
- A number in the pattern (`2.0`) matches a constant tensor (initializer or
  `Constant` node) holding that single value.
- The matcher only answers "is this the shape of the math"; whether fusing is
  correct (axes, shapes, other consumers) is the rule's `check`, which says why.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.weights_on_disk import is_on_disk, tensor_array

COMMUTATIVE_OPS = frozenset({"Add", "Mul"})


@dataclass(eq=False)
class PatternVar:
    name: str


@dataclass(eq=False)
class PatternConstant:
    value: float


@dataclass(eq=False)
class PatternOp:
    op_type: str
    inputs: tuple
    label: str
    alternatives: tuple[str, ...] = ()  # other op types that compute the same thing here

    @property
    def op_types(self) -> tuple[str, ...]:
        return (self.op_type, *self.alternatives)


class _Builder:
    """`op.Sub(a, b)` records a PatternOp; ops are kept in the order they were written."""

    def __init__(self) -> None:
        self.ops: list[PatternOp] = []

    def __getattr__(self, op_type: str) -> Callable[..., PatternOp]:
        def make(*inputs, _label: str | None = None, _or: tuple[str, ...] = ()) -> PatternOp:
            wrapped = tuple(
                PatternConstant(float(value)) if isinstance(value, (int, float)) else value
                for value in inputs
            )
            pattern_op = PatternOp(op_type, wrapped, _label or f"{op_type}_{len(self.ops)}", tuple(_or))
            self.ops.append(pattern_op)
            return pattern_op

        return make


@dataclass
class Pattern:
    name: str
    root: PatternOp
    ops: list[PatternOp]  # in the order written, which is a topological order of the math

    @classmethod
    def trace(cls, function: Callable[..., PatternOp]) -> Pattern:
        parameters = list(inspect.signature(function).parameters)[1:]
        builder = _Builder()
        root = function(builder, *(PatternVar(name) for name in parameters))
        return cls(function.__name__, root, builder.ops)


@dataclass
class Match:
    pattern: Pattern
    nodes: dict[str, gs.Node] = field(default_factory=dict)  # op label -> node
    values: dict[str, gs.Tensor] = field(default_factory=dict)  # parameter name -> tensor

    def ordered_nodes(self) -> list[gs.Node]:
        """The matched nodes in the pattern's (topological) order."""
        return [self.nodes[op.label] for op in self.pattern.ops]

    @property
    def root(self) -> gs.Node:
        return self.nodes[self.pattern.root.label]


def match(pattern: Pattern, node: gs.Node) -> Match | None:
    """Match `pattern` with `node` as its root; None when the math is not this."""
    state = Match(pattern)
    return state if _match_op(pattern.root, node, state) else None


def _match_op(pattern_op: PatternOp, node: gs.Node, state: Match) -> bool:
    if pattern_op.label in state.nodes:
        return state.nodes[pattern_op.label] is node
    if node.op not in pattern_op.op_types or (node.domain or "") not in DEFAULT_DOMAINS:
        return False
    arity = len(pattern_op.inputs)
    if len(node.inputs) < arity:
        return False
    orders = [node.inputs[:arity]]
    if pattern_op.op_type in COMMUTATIVE_OPS and arity == 2:
        orders.append(node.inputs[1::-1])
    for tensors in orders:
        saved_nodes, saved_values = dict(state.nodes), dict(state.values)
        state.nodes[pattern_op.label] = node
        if all(_match_value(p, t, state) for p, t in zip(pattern_op.inputs, tensors)):
            return True
        state.nodes, state.values = saved_nodes, saved_values
    return False


def _match_value(pattern_value, tensor: gs.Tensor, state: Match) -> bool:
    if isinstance(pattern_value, PatternVar):
        bound = state.values.setdefault(pattern_value.name, tensor)
        return bound is tensor
    if isinstance(pattern_value, PatternConstant):
        value = constant_value(tensor)
        numeric = value is not None and value.size == 1 and value.dtype.kind in "fiub"
        return numeric and float(value.reshape(())) == pattern_value.value
    producer = single_producer(tensor)
    return producer is not None and _match_op(pattern_value, producer, state)


def single_producer(tensor: gs.Tensor) -> gs.Node | None:
    """The node whose first output is `tensor`, if there is exactly one."""
    if is_constant(tensor) or len(tensor.inputs) != 1:
        return None
    producer = tensor.inputs[0]
    return producer if producer.outputs and producer.outputs[0] is tensor else None


def constant_value(tensor: gs.Tensor) -> np.ndarray | None:
    """The value of an initializer or of a `Constant` node's output; None otherwise."""
    if is_constant(tensor):
        return _constant_array(tensor)
    if len(tensor.inputs) != 1 or tensor.inputs[0].op != "Constant":
        return None
    attrs = tensor.inputs[0].attrs
    if is_constant(attrs.get("value")):
        return np.asarray(attrs["value"].values)
    for key in ("value_float", "value_floats", "value_int", "value_ints"):
        if key in attrs:
            return np.asarray(attrs[key])
    return None


def is_constant(tensor) -> bool:
    """An initializer: graphsurgeon's `Constant`, or its `proto_view` counterpart."""
    return isinstance(tensor, gs.Constant) or getattr(tensor, "is_initializer", False)


def _constant_array(constant: gs.Constant) -> np.ndarray:
    if not isinstance(constant, gs.Constant):  # a proto_view.ConstantView reads the same way itself
        return constant.values
    lazy = getattr(constant, "_values", None)
    # gs would read it with numpy_helper.to_array, which refuses an anchored file (weights_on_disk.py).
    if isinstance(lazy, LazyValues) and is_on_disk(lazy.tensor):
        return tensor_array(lazy.tensor)
    return np.asarray(constant.values)


def static_shape(tensor: gs.Tensor) -> list | None:
    """The tensor's shape (ints, or None/str for unknown dims); None if the rank is unknown."""
    if is_constant(tensor):
        return list(tensor.shape)
    return None if tensor.shape is None else list(tensor.shape)
