"""The LayerNorm fusion rule: `pattern`, `check`, `rewrite` (onnxscript-rewriter style).

`PATTERNS` (layernorm_patterns.py) spell out the math as torch, tf2onnx and
jax2tf export it; `check` returns why a match must not be fused (None when it
may); `rewrite` produces the `LayerNormalization` node. `layernorm_fusion`
applies the rule to a graph.

Decisions in `check`, in the order they are tested:
- Every intermediate tensor must be used only inside the match and must not be
  a graph output: fusing would remove a value someone else reads.
- Every ReduceMean (E[x], and the variance or E[x^2]) reduces over exactly
  the trailing axes, with keepdims=1. A GlobalAveragePool in its place
  (tf2onnx) averages over [2, rank) and keeps them: trailing by definition,
  so it needs only x's rank (unknown: refused, the axis cannot be written).
  LayerNorm2d (axis 1 of NCHW, gamma [1,C,1,1]) normalises each pixel over its
  channels; `LayerNormalization` with axis=1 would normalise over C*H*W and
  change the results, so it is refused.
- epsilon is a constant scalar (it becomes an attribute). An InstanceNormalization
  (tf2onnx) carries its own `epsilon` attribute (default 1e-5), carried over.
- An InstanceNormalization normalises over [2, rank) (trailing, like a
  GlobalAveragePool: it needs x's rank) and then applies its own scale and bias per
  index of axis 1, which `LayerNormalization` cannot express: both must be provably
  1 and 0 (an initializer or `Constant` of those values, or a `ConstantOfShape` of
  1.0 / 0.0 whatever shape it is given, as tf2onnx writes them); else refused (an
  instance norm with learned affine parameters, AdaIN's styles).
- gamma/beta have exactly the normalised trailing dims, after leading 1s, and
  no more dims than x (else the original broadcast changes the output rank);
  leading 1s are dropped on a constant copy, so they must be constants then.
  Without gamma/beta, the normalised dims must be static (the rewrite needs
  a scale of ones of that shape; `LayerNormalization` requires a scale).
- `axis` is written negative (-k): valid for any rank, as torch writes it.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from trtpipe.graph.layernorm.layernorm_patterns import PATTERNS, RESTORED
from trtpipe.graph.layernorm.pattern import Match, constant_value, is_constant, single_producer, static_shape

FUSED_OP = "LayerNormalization"
INSTANCE_NORM = "InstanceNormalization"
INSTANCE_NORM_EPSILON = 1e-5  # the ONNX default of InstanceNormalization's epsilon


ANCHOR = "mean"  # the label of the node that names a match in reports


def check(found: Match, graph_outputs: set[str]) -> str | None:
    """Why this match must not be fused, or None."""
    return (
        _intermediates_private(found, graph_outputs)
        or _axes_problem(found)
        or _restored_problem(found)
        or _epsilon_problem(found)
        or _instance_affine_problem(found)
        or _scale_problem(found)
    )


def rewrite(found: Match, name: str) -> gs.Node:
    """The `LayerNormalization` node replacing the match; its output is the match's output."""
    x, scale, bias, attrs = fused_parts(found, name)
    scale, bias = (gs.Constant(*part) if isinstance(part, tuple) else part for part in (scale, bias))
    return gs.Node(FUSED_OP, name=name, attrs=attrs, inputs=[x, scale, bias], outputs=[found.root.outputs[0]])


def fused_parts(found: Match, name: str) -> tuple:
    """(x, scale, bias, attrs) of the fused node; scale/bias are a matched tensor or a new
    constant as (name, values). Shared by `rewrite` and the ModelProto rewrite (layernorm_proto)."""
    x = found.values["x"]
    count = len(trailing_axes(found))
    epsilon = _epsilon(found)
    if "gamma" in found.values:
        scale = _without_leading_ones(found.values["gamma"], count, f"{name}/scale")
        bias = _without_leading_ones(found.values["beta"], count, f"{name}/bias")
    else:
        dims = static_shape(x)[-count:]
        dtype = np.dtype(x.dtype) if x.dtype is not None else np.float32
        scale = (f"{name}/scale", np.ones(dims, dtype=dtype))
        bias = (f"{name}/bias", np.zeros(dims, dtype=dtype))
    return x, scale, bias, {"axis": -count, "epsilon": epsilon}


def trailing_axes(found: Match) -> list[int]:
    """The reduction axes as negative numbers (only valid after `check` accepted)."""
    rank = _rank(found.values["x"])
    axes = _reduction_axes(found.nodes[_reductions(found)[0]], rank)
    return _normalised(axes if axes is not None else list(range(rank)), rank)


def _intermediates_private(found: Match, graph_outputs: set[str]) -> str | None:
    inside = {id(node) for node in found.nodes.values()}
    for node in found.ordered_nodes():
        if node is found.root:
            continue
        for tensor in node.outputs:
            if tensor.name in graph_outputs:
                return f"intermediate tensor {tensor.name!r} of {node.name} is a graph output"
            outsiders = [user for user in tensor.outputs if id(user) not in inside]
            if outsiders:
                return (
                    f"intermediate tensor {tensor.name!r} of {node.name} is also used by "
                    f"{outsiders[0].name} ({outsiders[0].op})"
                )
    return None


def _axes_problem(found: Match) -> str | None:
    x = found.values["x"]
    rank = _rank(x)
    resolved = []
    for label in _reductions(found):
        node = found.nodes[label]
        axes = _reduction_axes(node, rank)
        if isinstance(axes, str):
            return axes
        keepdims = int(node.attrs.get("keepdims", 1))
        if node.op == "ReduceMean" and keepdims != 1:
            return f"{node.name} has keepdims=0, so the mean does not broadcast back over x"
        if node.op == "ReduceSum" and keepdims != 0:
            return f"{node.name} has keepdims=1 where this form reshapes a flat sum back"
        if axes is None:
            if rank is None:
                return f"{node.name} reduces over all axes and the rank of {x.name!r} is unknown"
            axes = list(range(rank))
        if rank is None and any(axis >= 0 for axis in axes):
            return f"{node.name} reduces over axes {axes} but the rank of {x.name!r} is unknown"
        resolved.append((axes, _normalised(axes, rank)))
    (mean_axes, mean_normalised), others = resolved[0], resolved[1:]
    for variance_axes, variance_normalised in others:
        if mean_normalised != variance_normalised:
            return f"the two ReduceMeans reduce over different axes ({mean_axes} and {variance_axes})"
    if mean_normalised != list(range(-len(mean_normalised), 0)):
        shown = sorted({axis % rank for axis in mean_axes}) if rank else mean_axes
        what = f"axis {shown[0]}" if len(shown) == 1 else f"axes {shown}"
        return f"reduces over {what}, not the trailing axes"
    return None


def _reductions(found: Match) -> list[str]:
    return [op.label for op in found.pattern.ops if op.op_type in ("ReduceMean", "ReduceSum", INSTANCE_NORM)]


def _restored_problem(found: Match) -> str | None:
    """jax2tf's form: the sums are scaled by exactly 1/N, and every Reshape/Expand gives
    x's shape with 1 on the reduced axes (the keepdims form), as far as it can be proven."""
    if "inv_n" not in found.values:
        return None
    x = found.values["x"]
    shape, axes = static_shape(x), trailing_axes(found)
    if shape is None:
        return f"the shape of {x.name!r} is unknown, so the flat sums cannot be shown to reshape back"
    reduced = shape[len(shape) + axes[0]:]
    if not all(isinstance(dim, int) for dim in reduced):
        return f"the reduced dims {reduced} of {x.name!r} are not static, so 1/N cannot be checked"
    count = int(np.prod(reduced))
    for role in ("inv_n", "inv_n_2"):
        value = constant_value(found.values[role])
        if value is None or value.size != 1 or not np.isclose(float(value.reshape(())), 1.0 / count, rtol=1e-6):
            return f"{found.values[role].name!r} is not the constant 1/{count} that makes a sum a mean"
    wanted = shape[:len(shape) + axes[0]] + [1] * len(axes)
    for label in RESTORED:
        node = found.nodes[label]
        got = static_shape(node.outputs[0])
        # Equal dims (a named dim equals itself) are proven; one unknown kept dim is forced
        # by the element count (the flat sum has exactly the kept dims' elements).
        open_dims = [] if got is None else [i for i, (have, want) in enumerate(zip(got, wanted))
                                            if have is None or have != want]
        proven = got is not None and len(got) == len(wanted) and len(open_dims) <= 1 and all(
            not isinstance(got[i], int) and i < len(wanted) - len(axes) for i in open_dims)
        if node.op == "Expand":  # to the shape it was just reshaped to (the same tensor), as jax2tf writes it
            reshape = node.inputs[0].inputs[0]
            proven = proven and (reshape.inputs[1] is node.inputs[1]
                                 or (None not in got and got == static_shape(node.inputs[0])))
        if not proven:
            return f"{node.name} gives shape {got}, not provably the keepdims shape {wanted}"
    return None


def _epsilon(found: Match) -> float:
    """The epsilon the fused node gets (only valid after `check` accepted)."""
    if "eps" not in found.values:  # an InstanceNormalization's attribute
        return float(found.nodes[ANCHOR].attrs.get("epsilon", INSTANCE_NORM_EPSILON))
    return float(constant_value(found.values["eps"]).reshape(()))


def _epsilon_problem(found: Match) -> str | None:
    if "eps" not in found.values:
        return None  # an attribute: a constant by definition
    value = constant_value(found.values["eps"])
    if value is None or value.size != 1:
        return f"epsilon {found.values['eps'].name!r} is not a constant scalar"
    return None


def _instance_affine_problem(found: Match) -> str | None:
    """An InstanceNormalization's own scale and bias are exactly 1 and 0 (see the module docstring)."""
    if "ones" not in found.values:
        return None
    node = found.nodes[ANCHOR]
    for role, want in (("ones", 1.0), ("zeros", 0.0)):
        tensor = found.values[role]
        value = _filled_value(tensor)
        what = "scale" if role == "ones" else "bias"
        if value is None:
            return (f"the {what} {tensor.name!r} of {node.name} is not a constant, so it cannot be shown to be "
                    f"{want:g} ({node.op} applies it per index of axis 1, which LayerNormalization cannot)")
        if value.size == 0 or not np.all(value == want):
            return (f"the {what} {tensor.name!r} of {node.name} is not all {want:g}: {node.op} applies it per index "
                    "of axis 1, which LayerNormalization cannot")
    return None


def _filled_value(tensor: gs.Tensor) -> np.ndarray | None:
    """The constant values of `tensor`, or the fill value of the `ConstantOfShape` producing it (whatever the
    shape: every element is that value); None when neither."""
    value = constant_value(tensor)
    if value is not None:
        return value
    producer = single_producer(tensor)
    if producer is None or producer.op != "ConstantOfShape":
        return None
    fill = producer.attrs.get("value")
    return np.zeros(1, np.float32) if fill is None else np.asarray(fill.values) if is_constant(fill) else None


def _scale_problem(found: Match) -> str | None:
    x = found.values["x"]
    count, rank = len(trailing_axes(found)), _rank(x)
    x_shape = static_shape(x)
    wanted = x_shape[-count:] if x_shape is not None else [None] * count
    if "gamma" not in found.values:
        if not all(isinstance(dim, int) for dim in wanted):
            return f"normalised dims {wanted} of {x.name!r} are not static and there is no gamma to take them from"
        try:
            np.dtype(x.dtype if x.dtype is not None else np.float32)
        except TypeError:
            return f"element type {x.dtype} of {x.name!r} has no NumPy equivalent for a scale of ones"
        return None
    for role in ("gamma", "beta"):
        tensor = found.values[role]
        shape = static_shape(tensor)
        if shape is None:
            return f"{role} {tensor.name!r} has an unknown shape"
        trailing, leading = shape[-count:], shape[:-count]
        same = len(trailing) == count and all(
            not isinstance(want, int) or have == want for have, want in zip(trailing, wanted)
        )
        if not same or any(dim != 1 for dim in leading):
            return f"{role} shape {shape} does not match the normalised dims {wanted}"
        if leading and (rank is None or len(shape) > rank):
            return f"{role} shape {shape} has more dims than {x.name!r}; fusing would change the output rank"
        if leading and constant_value(tensor) is None:
            return f"{role} {tensor.name!r} has leading 1s and is not a constant"
    return None


def _reduction_axes(node: gs.Node, rank: int | None) -> list[int] | None | str:
    """Axes of a ReduceMean (attribute, or input at opset 18) or GlobalAveragePool ([2, rank) of x,
    whose rank the mean's and the variance's inputs share); None = all; a str = why unknown."""
    if node.op in ("GlobalAveragePool", INSTANCE_NORM):
        if rank is None or rank < 3:
            return f"{node.name} is a {node.op} and the rank of its input is {rank or 'unknown'}"
        return list(range(2, rank))
    if len(node.inputs) > 1 and node.inputs[1].name:
        value = constant_value(node.inputs[1])
        if value is None:
            return f"the axes of {node.name} are computed at run time"
        axes = [int(axis) for axis in value.reshape(-1)]
    else:
        axes = node.attrs.get("axes")
        axes = None if axes is None else [int(axis) for axis in axes]
    if not axes:
        if int(node.attrs.get("noop_with_empty_axes", 0)) == 1:
            return f"{node.name} has empty axes with noop_with_empty_axes=1 (it reduces nothing)"
        return None
    return axes


def _rank(tensor: gs.Tensor) -> int | None:
    shape = static_shape(tensor)
    return None if shape is None else len(shape)


def _normalised(axes: list[int], rank: int | None) -> list[int]:
    return sorted({axis - rank if (rank is not None and axis >= 0) else axis for axis in axes})


def _without_leading_ones(tensor: gs.Tensor, count: int, new_name: str) -> gs.Tensor | tuple[str, np.ndarray]:
    shape = static_shape(tensor)
    if len(shape) == count:
        return tensor
    values = constant_value(tensor)  # check() refused non-constants with leading 1s
    return new_name, np.ascontiguousarray(values.reshape(shape[-count:]))
