"""The build's optimization profile taken from the sample data, and sample data checked against given profiles.

Decisions (issue 24, item 3: dynamic shapes in one step):
- A model with dynamic inputs and sample data of concrete shapes (`data.path`, or
  `data.inputs.<name>.shape`) builds without `build.profiles`: the data's shapes are the
  profile, min = opt = max = the data's shape. That engine runs exactly the shapes
  validation feeds it; the build's console line and summary say so and print the
  `build.profiles=...` override that widens it (the same profile written out: the sizes
  to deploy are the user's to choose; min 1 or a larger max is not valid for every
  model, e.g. a Conv over a dynamic spatial dimension).
- Sample data with several iterations of different shapes (Polygraphy JSON) gives
  min/max per dimension over the iterations and opt = the first iteration's shape.
- `build.require_profiles=true` (for CI) keeps the old rule: dynamic inputs without
  `build.profiles` are an error, whose Fix writes the data's shapes when the data has
  them (so the pasted profile admits the data: the next check cannot fail).
- The build stage never reads another stage's config: it receives the data's shapes
  from the runner (`config["data_shapes"]`, from the top-level `data` block), and those
  shapes are part of its cache key while they make the profile (BuildEngine.key_config).
- Sample data outside a given profile (a dimension outside [min, max]) is an error
  naming the input, the dimension and the range, raised by the runner before any stage
  runs (so also on a cached build). Its Fix widens the profile to admit the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtpipe.config.override_text import profile_list_override
from trtpipe.errors import UserError
from trtpipe.trt.profiles import outside_axes

# input name -> the distinct shapes of the sample data, in the order they first occur.
DataShapes = Mapping[str, Sequence[Sequence[int]]]


def profile_from_data(dynamic: Mapping[str, Sequence], data_shapes: DataShapes | None) -> dict | None:
    """{input: {min, opt, max}} for every dynamic input, from the data; None when the data lacks one."""
    profile = {}
    for name, dims in dynamic.items():
        shapes = [list(s) for s in (data_shapes or {}).get(name) or ()
                  if len(s) == len(dims) and all(not isinstance(d, int) or d == v for d, v in zip(dims, s))]
        if not shapes:
            return None
        profile[name] = {"min": [min(axis) for axis in zip(*shapes)], "opt": list(shapes[0]),
                         "max": [max(axis) for axis in zip(*shapes)]}
    return profile


def data_example(dynamic: Mapping[str, Sequence], data_shapes: DataShapes | None) -> dict[str, list[int]]:
    """A concrete shape per dynamic input: the data's first shape where it fits, else every dynamic size 1."""
    result = {}
    for name, dims in dynamic.items():
        one = profile_from_data({name: dims}, data_shapes)
        result[name] = one[name]["opt"] if one else [d if isinstance(d, int) else 1 for d in dims]
    return result


def profile_text(profile: Mapping[str, Mapping[str, Sequence[int]]]) -> str:
    """`x [2,3,8,8]` (min = opt = max), else `x min [..] opt [..] max [..]`, per input."""
    parts = []
    for name, spec in profile.items():
        if spec["min"] == spec["opt"] == spec["max"]:
            parts.append(f"{name} {_dims(spec['opt'])}")
        else:
            parts.append(f"{name} min {_dims(spec['min'])} opt {_dims(spec['opt'])} max {_dims(spec['max'])}")
    return ", ".join(parts)


def derived_profile_fact(profile: Mapping[str, Mapping[str, Sequence[int]]]) -> str:
    """The build line's words for a profile taken from the data, with the override that widens it."""
    same = all(spec["min"] == spec["opt"] == spec["max"] for spec in profile.values())
    override = profile_list_override([profile])
    widen = (f"to widen it, set min/max to the sizes you deploy in {override}" if override else
             "widen it in build.profiles in a config file (these input names cannot be written in an override)")
    return (f"profile from the sample data{' (min = opt = max)' if same else ''}: {profile_text(profile)}; "
            f"{widen}")


def check_data_in_profiles(profiles, data_shapes: DataShapes, where: str) -> None:
    """UserError when a sample shape lies outside every given profile (checked per input and dimension).

    Only well-formed profile entries of the data's rank are compared: the build stage reports a
    malformed profile, and the stages that read the data report a shape the model cannot take."""
    ranges = [_well_formed(profile) for profile in profiles or ()]
    if not ranges or not all(ranges):
        return
    for name, shapes in (data_shapes or {}).items():
        for shape in shapes:
            outside = [(index, axis) for index, profile in enumerate(ranges)
                       for axis in _outside(shape, profile.get(name))]
            fitting = {index for index in range(len(ranges))} - {index for index, _ in outside}
            if fitting or not outside:
                continue
            index, axis = outside[0]
            spec = ranges[index][name]
            widened = [dict(profile) for profile in ranges]
            widened[index] = {**ranges[index], name: _widened(spec, shape)}
            override = profile_list_override(widened)
            others = f" (and outside the other {len(ranges) - 1} profile(s))" if len(ranges) > 1 else ""
            raise UserError(
                f"the sample input {name!r} ({where}) has shape {_dims(shape)}: dimension {axis} is {shape[axis]}, "
                f"outside build.profiles[{index}].{name}'s range [{spec['min'][axis]}, {spec['max'][axis]}]"
                f"{others}; the engine could not run it",
                (f"widen the profile to admit the data, {override}, " if override else
                 "widen build.profiles in a config file to admit the data, ") + "or give sample data within the range")


def _well_formed(profile) -> dict | None:
    if not isinstance(profile, Mapping):
        return None
    result = {}
    for name, spec in profile.items():
        if not isinstance(spec, Mapping) or not all(isinstance(spec.get(k), Sequence) and not isinstance(
                spec.get(k), (str, bytes)) and all(isinstance(v, int) for v in spec.get(k)) for k in ("min", "opt", "max")):
            return None
        result[name] = {k: [int(v) for v in spec[k]] for k in ("min", "opt", "max")}
    return result


def _outside(shape: Sequence[int], spec) -> list[int]:
    """Axes outside the spec's range; none for an input the profile does not give or of another rank."""
    return (outside_axes(shape, spec) or []) if spec is not None else []


def _widened(spec: Mapping[str, Sequence[int]], shape: Sequence[int]) -> dict[str, list[int]]:
    return {"min": [min(a, b) for a, b in zip(spec["min"], shape)], "opt": list(spec["opt"]),
            "max": [max(a, b) for a, b in zip(spec["max"], shape)]}


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(v)) for v in shape) + "]"
