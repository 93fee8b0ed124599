"""Optimization profiles: per-input min/opt/max shapes, checked against the ONNX graph.

Decisions:
- The check needs no TensorRT: the dynamic inputs are read from the ONNX graph, so a
  model with dynamic inputs and no profile is a user error on every machine, naming
  each input with its shape and showing the config to write.
- A profile must give every dynamic input, with the model's rank, the model's static
  dimensions, and min <= opt <= max per dimension. Static inputs may be omitted.
- Profiles stay plain data (lists of ints) until the builder turns them into
  Polygraphy `Profile` objects; the trtexec renderer uses the same data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from trtpipe.config.override_text import input_shape_override, profiles_override
from trtpipe.errors import UserError
from trtpipe.onnxmodel import input_dims

ShapeSpec = Mapping[str, Sequence[int]]  # {"min": [...], "opt": [...], "max": [...]}
KEYS = ("min", "opt", "max")


def input_shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Graph inputs that must be fed -> dims (int, the dim_param name, or None when unknown)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    shapes: dict[str, list[int | str | None]] = {}
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        # The one rule (trtpipe/onnxmodel/input_dims.py): only a positive dim_value is fixed.
        sizes = input_dims.dims(value) or []
        names = [dim.dim_param or None for dim in value.type.tensor_type.shape.dim]
        shapes[value.name] = [size if size is not None else name for size, name in zip(sizes, names)]
    return shapes


def dynamic_inputs(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    return {name: dims for name, dims in input_shapes(model).items() if any(not isinstance(d, int) for d in dims)}


PROFILE_FORM = "write each profile as {input_name: {min: [...], opt: [...], max: [...]}}"


def checked_profiles(model: onnx.ModelProto, profiles: Sequence[Mapping[str, ShapeSpec]],
                     data_shapes: Mapping | None = None, require: bool = False) -> list[dict]:
    """The profiles as {input: {min, opt, max: list[int]}}; UserError with the full key when wrong.

    Without `profiles`, dynamic inputs take the sample data's shapes (`data_shapes`, see
    trtpipe.trt.data_profiles) unless `require` (build.require_profiles) forbids it."""
    shapes, dynamic = input_shapes(model), dynamic_inputs(model)
    if dynamic and not profiles:
        from trtpipe.trt.data_profiles import data_example, profile_from_data

        derived = None if require else profile_from_data(dynamic, data_shapes)
        if derived is not None:
            return [derived]
        listed = ", ".join(f"{name} {_shape_text(dims)}" for name, dims in dynamic.items())
        example = data_example(dynamic, data_shapes)
        if require:
            raise UserError(
                f"the model has dynamic inputs ({listed}) and build.profiles is empty "
                "(build.require_profiles=true demands them)",
                f"give min/opt/max shapes for each of them (below: the shapes of the sample data, or 1 where it has "
                f"none; widen min/max to the sizes you deploy), e.g. {example_profiles(example)}",
            )
        data_fix = " ".join(o for name, shape in example.items() if (o := input_shape_override(name, shape)))
        raise UserError(
            f"the model has dynamic inputs ({listed}), build.profiles is empty and the sample data gives no "
            "shape for them",
            f"give sample data of the shapes to build for (data.path, or data.inputs.<name>.shape: the build then "
            f"takes them as its profile), e.g. {data_fix or 'data.path'}, or min/opt/max shapes, e.g. "
            f"{example_profiles(example)}",
        )
    result = []
    for index, profile in enumerate(profiles or ()):
        where = f"build.profiles[{index}]"
        if not isinstance(profile, Mapping):
            raise UserError(f"{where} is not a mapping of input name -> {{min, opt, max}}", PROFILE_FORM)
        _refuse_unknown_inputs(where, profile, shapes)
        missing = [name for name in dynamic if name not in profile]
        if missing:
            raise UserError(f"{where} lacks the dynamic input(s) {missing}",
                            "give min/opt/max shapes for every dynamic input in every profile")
        result.append({name: _checked_spec(f"{where}.{name}", spec, shapes[name]) for name, spec in profile.items()})
    return result


def check_profiles_fit(model: onnx.ModelProto, profiles: Sequence[Mapping[str, ShapeSpec]]) -> None:
    """Each profile names inputs of the model, with their rank and fixed sizes, min <= opt <= max.

    Decision (issue 32, item 12): the runner checks this before any stage, because profile 0's
    opt shapes size the sample inputs: a mistake in build.profiles (an unknown input, 17 for a
    dimension fixed at 16) was reported as a data.inputs mistake with a data.inputs Fix. A profile
    lacking a dynamic input is left to the build (without a build it is no mistake)."""
    shapes = input_shapes(model)
    for index, profile in enumerate(profiles or ()):
        where = f"build.profiles[{index}]"
        if not isinstance(profile, Mapping):
            return  # opt_shapes and the build say so, in the same words
        _refuse_unknown_inputs(where, profile, shapes)
        for name, spec in profile.items():
            _checked_spec(f"{where}.{name}", spec, shapes[name])


def _refuse_unknown_inputs(where: str, profile: Mapping, shapes: Mapping) -> None:
    unknown = sorted(set(profile) - set(shapes))
    if unknown:
        raise UserError(f"{where} names {unknown}, which are not inputs of the model "
                        f"(its inputs: {sorted(shapes)})", "use the model's input names")


def example_profiles(dynamic: Mapping[str, Sequence]) -> str:
    """A `build.profiles=...` override that fits `dynamic` (every dynamic size 1): it works when pasted."""
    shapes = {name: [d if isinstance(d, int) else 1 for d in dims] for name, dims in dynamic.items()}
    return profiles_override(shapes) or (
        "build.profiles in a config file (Hydra's override grammar cannot spell these input names, even "
        "escaped): " + "; ".join(f"{name}: {{min: {s}, opt: {s}, max: {s}}}" for name, s in shapes.items()))


def _checked_spec(where: str, spec, dims: list) -> dict[str, list[int]]:
    if not isinstance(spec, Mapping) or sorted(spec) != sorted(KEYS):
        raise UserError(f"{where} must have exactly the keys min, opt, max", f"write {where}={{min:[..],opt:[..],max:[..]}}")
    shapes = {}
    for key in KEYS:
        values = spec[key]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or \
                not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise UserError(f"{where}.{key} is {values!r}, not a list of non-negative integers", "write e.g. [1, 3, 224, 224]")
        if len(values) != len(dims):
            raise UserError(f"{where}.{key} has rank {len(values)}, the input has rank {len(dims)} {_shape_text(dims)}",
                            "give one size per dimension")
        for axis, (value, dim) in enumerate(zip(values, dims)):
            if isinstance(dim, int) and value != dim:
                raise UserError(f"{where}.{key}[{axis}] is {value}, but that dimension is fixed at {dim} {_shape_text(dims)}",
                                f"use {dim} there")
        shapes[key] = [int(v) for v in values]
    for axis in range(len(dims)):
        low, opt, high = (shapes[key][axis] for key in KEYS)
        if not low <= opt <= high:
            raise UserError(f"{where}: dimension {axis} has min {low}, opt {opt}, max {high}",
                            "make min <= opt <= max for every dimension")
    return shapes


def opt_shapes(profiles: Sequence[Mapping[str, ShapeSpec]], index: int = 0) -> dict[str, list[int]]:
    """Input name -> opt shape of one profile: the shapes validation feeds when inputs don't say."""
    if not profiles:
        return {}
    where, profile = f"build.profiles[{index}]", profiles[index]
    if not isinstance(profile, Mapping):
        raise UserError(f"{where} is not a mapping of input name -> {{min, opt, max}}", PROFILE_FORM)
    shapes = {}
    for name, spec in profile.items():
        opt = spec.get("opt") if isinstance(spec, Mapping) else None
        if not isinstance(opt, (list, tuple)):
            raise UserError(f"{where}.{name} has no opt shape (a list of sizes)", PROFILE_FORM)
        shapes[name] = list(opt)
    return shapes


def profile_fitting(shapes: Mapping[str, Sequence[int]], ranges: Sequence[Mapping[str, ShapeSpec]]) -> int | None:
    """Index of the first profile whose [min, max] contains every given input shape."""
    for index, profile in enumerate(ranges):
        if all(_fits(shapes[name], spec) for name, spec in profile.items() if name in shapes):
            return index
    return None


def _fits(shape: Sequence[int], spec: ShapeSpec) -> bool:
    return outside_axes(shape, spec) == []


def outside_axes(shape: Sequence[int], spec: ShapeSpec) -> list[int] | None:
    """The axes of `shape` outside the spec's [min, max]; None when the ranks differ."""
    if len(spec["min"]) != len(shape) or len(spec["max"]) != len(shape):
        return None
    return [axis for axis, size in enumerate(shape) if not spec["min"][axis] <= size <= spec["max"][axis]]


def _shape_text(dims: Sequence) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
