"""Legacy "constraints" mode (TensorRT 10.x only): the plan's precisions as per-layer constraints.

Decisions:
- Every layer of a node gets the node's precision, not only the layer named like the
  node: the parser adds `<node>_<N>` layers and helper layers, and a constraint on the
  first layer alone leaves the rest free to run FP16 (DESIGN.md, problem 1). Layers are
  mapped through their metadata `[ONNX Layer: <node>]`, then their names
  (trtpipe.trt.inspect.layer_names).
- A layer gets the precision and, for each float output, the output type. Non-float
  outputs (shapes, indices, masks) are left alone, and so are shape and constant layers
  (Polygraphy's `util.EXCLUDE_LAYERS` skips the same two types).
- A layer carrying several nodes gets FP32 if any of them is planned FP32 (protective).
- Pure data in, data out: the builder reads the real layers into `LayerView`s and
  applies the result; tests use hand-made views.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from trtpipe.trt.inspect.layer_names import layer_mapper

CONSTRAINED = ("fp32", "bf16", "fp16")  # in order of preference when a layer carries several nodes
FLOAT_TYPES = ("fp32", "fp16", "bf16")
SKIPPED_LAYER_TYPES = ("SHAPE", "CONSTANT")


@dataclass(frozen=True)
class LayerView:
    name: str
    metadata: str | None
    layer_type: str  # trt.LayerType member name, e.g. "ELEMENTWISE"
    output_dtypes: Sequence[str | None] = field(default_factory=tuple)  # fp32, fp16, int32, ...


@dataclass(frozen=True)
class Constraint:
    precision: str
    float_outputs: tuple[int, ...]
    nodes: tuple[str, ...]


def legacy_constraints(layers: Sequence[LayerView], plan: Mapping,
                       tensors: Collection[str] = ()) -> tuple[dict[str, Constraint], list[str]]:
    """(layer name -> constraint, names of layers that map to no plan node). `tensors`: the network's
    tensor names (a layer named after one is not read as `<node>_<N>`, see layer_names)."""
    planned = {n["name"]: n["precision"] for n in plan.get("nodes", [])}
    mapped = layer_mapper(planned.keys(), set(tensors))
    constraints: dict[str, Constraint] = {}
    unmapped: list[str] = []
    for layer in layers:
        if layer.layer_type.upper() in SKIPPED_LAYER_TYPES:
            continue
        nodes = [n for n in mapped(layer.name, layer.metadata) if n in planned]
        if not nodes:
            unmapped.append(layer.name)
            continue
        precisions = {planned[n] for n in nodes}
        precision = next((p for p in CONSTRAINED if p in precisions), None)
        if precision is None:
            continue  # kept as authored, or no float output: no constraint
        outputs = tuple(i for i, dtype in enumerate(layer.output_dtypes) if dtype in FLOAT_TYPES)
        constraints[layer.name] = Constraint(precision, outputs, tuple(nodes))
    return constraints, unmapped


def constraints_summary(constraints: Mapping[str, Constraint], unmapped: Sequence[str]) -> str:
    by_precision: dict[str, int] = {}
    for constraint in constraints.values():
        by_precision[constraint.precision] = by_precision.get(constraint.precision, 0) + 1
    counts = ", ".join(f"{count} {precision}" for precision, count in sorted(by_precision.items()))
    lines = [f"constraints mode: precision set on {len(constraints)} layer(s) ({counts or 'none'}), "
             f"OBEY_PRECISION_CONSTRAINTS"]
    extra = {name: c for name, c in constraints.items() if name not in c.nodes}
    if extra:
        lines.append(f"  {len(extra)} of them are extra layers of a node (<node>_<N> or helper layers): "
                     + ", ".join(f"{name} <- {c.nodes[0]}" for name, c in list(extra.items())[:20]))
    if unmapped:
        lines.append(f"  {len(unmapped)} layer(s) name no plan node and are left unconstrained: "
                     + ", ".join(unmapped[:20]))
    return "\n".join(lines)
