"""Sample inputs for validation: generated from `data.inputs.<name>` specs, or read from `data.path`.

Decisions:
- Generation is seeded per (seed, iteration, input name): each input draws
  from its own `np.random.RandomState([seed, iteration, crc32(name)])`, so
  adding or changing one input's spec does not change the values of the
  others, and the same config gives the same arrays in every run and process.
  RandomState, not a `Generator`, because NumPy freezes its stream across
  releases (NEP 19), as the built-in models' weights rely on too; the inputs
  feed cached stages, so they must not change with a NumPy upgrade.
- The model's declared element type decides the dtype of the array. A spec's
  `dtype` must be of the same kind (integer/bool vs float): a different width
  (float16 for a float32 input) is converted with a logged note, a different
  kind is a user error.
- Integer and bool inputs are token ids, masks, indices: random floats or the
  range [-1, 1] would be meaningless (and out of range for a Gather). An integer
  input without `low`/`high` takes the range the model states (`input_ranges.py`:
  the rows of the embedding table it indexes, {0, 1} for a mask); every integer
  input whose range cannot be read is named in one user error, with one Fix
  covering them all (`integer_specs`; issue 30, item 5: they failed one at a time).
  A float input without a spec gets uniform [0, 1) and a logged note.
  Integers are drawn from [low, high) (`high` exclusive, NumPy's convention).
- Dynamic dimensions (`input_dims`: dim_param, -1, 0, or an empty dim) have no
  size to draw: the spec gives the full `shape` (or the build's profile 0 its
  opt shape, filled in by data.py), which must agree with every static
  dimension. Without build.profiles the build takes the sample shapes as its
  profile (trtpipe/trt/data_profiles.py), so the shape alone reaches the end. A float input whose spec gives only a shape uses the default range.
- Loaded inputs (`.npz`: one iteration keyed by input name; Polygraphy JSON:
  a list of feed dicts, as `polygraphy run --save-inputs` writes them, or one
  dict) are checked against the model when it is given: every input present,
  no unknown names, exact dtype, static dimensions equal. A file is data the
  user controls, so nothing is converted silently; the only readings are
  lossless ones for what a file cannot name (raw bits of bfloat16/float8/int4,
  text for string inputs; `input_types.py`). Non-tensor inputs are refused first.
- A folder as `data.path` holds one input set per `.npz` file, read in name order (the
  order of the sets is the order of the iterations). Only its `*.npz` regular files (or links
  to them) are read: subfolders and other files (a README, a JSON of notes) are not input
  sets; a `.json` inputs file is named by `data.path` on its own.
"""

from __future__ import annotations

import logging
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

from trtpipe.config.override_text import input_shape_override, input_spec_override, input_specs_override
from trtpipe.errors import UserError
from trtpipe.onnxmodel import input_dims
from trtpipe.numerics.input_types import as_declared, declared_dtype, is_float, unreadable_npz_fix

logger = logging.getLogger(__name__)

DEFAULT_FLOAT_RANGE = (0.0, 1.0)


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that must be fed (initializers listed as inputs by old exporters are not)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def generate_inputs(
    model: onnx.ModelProto, specs: Mapping[str, Mapping], seed: int, iterations: int
) -> list[dict[str, np.ndarray]]:
    """`iterations` feed dicts drawn as the module docstring describes."""
    if not 0 <= int(seed) < 2**32:
        raise UserError(f"data.seed {seed} is out of range", "use an integer in [0, 2**32)")
    if iterations < 1:
        raise UserError(f"{iterations} validation iterations requested", "use at least 1 iteration")
    inputs = model_inputs(model)
    unknown = sorted(set(specs) - {value.name for value in inputs})
    if unknown:
        raise UserError(
            f"data.inputs names {unknown}, which are not inputs of the model "
            f"(its inputs: {[value.name for value in inputs]})",
            _remove_entries_fix(unknown),
        )
    specs, _ = integer_specs(model, specs)
    plans = [_draw_plan(value, specs.get(value.name)) for value in inputs]
    return [
        {name: draw(_stream(seed, iteration, name)) for name, draw in plans}
        for iteration in range(iterations)
    ]


def _remove_entries_fix(unknown: list[str]) -> str:
    """Pasteable where Hydra can name every entry: `'~data.inputs.NAME'` removes one. A key path has
    no escapes (`~data.inputs.x:0` does not parse) and a dict override only merges, so an entry named
    otherwise is removed where it was written."""
    if all(name.isidentifier() for name in unknown):
        return "rename them to inputs of the model, or remove them: " + " ".join(
            f"'~data.inputs.{name}'" for name in unknown)
    return ("rename or remove those entries where they are written (the override or config file naming them; "
            "no override can delete a key named so)")


def _stream(seed: int, iteration: int, name: str) -> np.random.RandomState:
    return np.random.RandomState([int(seed), iteration, zlib.crc32(name.encode())])


def _draw_plan(value: onnx.ValueInfoProto, spec: Mapping | None):
    """(name, function drawing the array from a RandomState) for one graph input."""
    name, dtype = value.name, declared_dtype(value)
    if dtype.kind in "OSU":
        raise UserError(f"model input {name!r} is a string tensor; strings cannot be generated",
                        "give its values in data.path (an .npz of np.array(values, dtype=str))")
    shape = _shape(value, spec)
    if spec is None:
        logger.info("input %s: no data.inputs.%s spec, drawing uniform [0, 1)", name, name)
        spec = {"low": DEFAULT_FLOAT_RANGE[0], "high": DEFAULT_FLOAT_RANGE[1]}
    low, high = _range(name, dtype, spec)
    _check_spec_dtype(name, dtype, spec)
    if is_float(dtype):
        return name, lambda rng: rng.uniform(low, high, size=shape).astype(dtype)
    return name, lambda rng: rng.randint(int(low), int(high), size=shape, dtype=np.int64).astype(dtype)


def _lacks_range(value: onnx.ValueInfoProto, spec: Mapping | None) -> bool:
    dtype = declared_dtype(value)
    return (not is_float(dtype) and dtype.kind not in "bOSU"
            and (spec is None or spec.get("low") is None or spec.get("high") is None))


def integer_specs(model: onnx.ModelProto, specs: Mapping[str, Mapping]) -> tuple[dict, dict]:
    """`specs` with the range the model states filled in for each integer input that gives none, and
    {input: ReadRange} of those decisions; every integer input left without a range is in one error."""
    from trtpipe.numerics.input_ranges import read_ranges

    lacking = [value for value in model_inputs(model) if _lacks_range(value, specs.get(value.name))]
    if not lacking:
        return dict(specs), {}
    read = read_ranges(model, [value.name for value in lacking])
    filled = dict(specs)
    for name, found in read.items():
        filled[name] = {**(specs.get(name) or {}), "low": found.low, "high": found.high}
    unread = [value for value in lacking if value.name not in read]
    if unread:
        raise _integer_ranges_needed(unread, specs)
    return filled, read


def _integer_ranges_needed(values: list[onnx.ValueInfoProto], specs: Mapping[str, Mapping]) -> UserError:
    """Integer inputs whose range neither data.inputs nor the model gives: one message, one Fix.

    Decision: the example range [0, 2) is valid for any index, mask or id input, so the Fix
    works when pasted; the message asks for the real ranges (the vocabulary)."""
    entries = {}
    for value in values:
        dtype, declared = declared_dtype(value), input_dims.dims(value)
        fields: dict = {"low": 0, "high": 2, "dtype": dtype.name}
        if input_dims.is_dynamic(declared) and declared is not None and not (specs.get(value.name) or {}).get("shape"):
            fields["shape"] = input_dims.example_shape(declared)
        entries[value.name] = fields
    names = [value.name for value in values]
    override = input_specs_override(entries)
    how = f"e.g. {override} with your real ranges" if override else "in data.path"
    listed = ", ".join(f"{name!r} ({entries[name]['dtype']})" for name in names)
    return UserError(
        "integer model inputs have no sample range (data.inputs.<name>.low/high) and the model states none "
        f"(no constant table they index, no mask use): {listed}; random values of ids, masks or indices "
        "would be meaningless",
        f"give their ranges, high exclusive (token ids: below the vocabulary size), {how}, or give data.path",
    )


def _shape(value: onnx.ValueInfoProto, spec: Mapping | None) -> list[int]:
    name = value.name
    declared = input_dims.dims(value)  # the one rule: -1, 0, dim_param and empty dims are dynamic
    shown = input_dims.shape_text(input_dims.labels(value))
    requested = None if spec is None else spec.get("shape")
    if requested is None:
        if input_dims.is_dynamic(declared):
            raise UserError(
                f"model input {name!r} has dynamic dimensions (shape {shown}), so there is no size to draw",
                dynamic_shape_fix(name, declared),
            )
        return declared
    requested = [int(d) for d in requested]
    if not input_dims.fits(requested, declared) or any(size <= 0 for size in requested):
        example = [max(1, size) for size in requested] if declared is None else input_dims.example_shape(declared)
        raise UserError(
            f"data.inputs.{name}.shape {requested} does not fit the model's shape {shown}",
            "give a positive size for every dimension and keep the fixed ones"
            + (f", e.g. {override}" if (override := input_shape_override(name, example)) else ""),
        )
    return requested


def dynamic_shape_fix(name: str, declared: list[int | None] | None) -> str:
    """The Fix for an input with no size to draw: a pasteable override where one can be written.

    Decision: with an unknown rank no override is offered as pasteable (any example
    could have the wrong rank); the message says what to write instead.
    """
    if declared is None:
        return (f"give its full shape in data.inputs.{name}.shape (the model does not declare its rank), "
                "or give data.path")
    example = input_shape_override(name, input_dims.example_shape(declared))
    if example is None:  # a name Hydra's override grammar cannot spell, even escaped ("x'0", "x#0")
        return "give the sample inputs in data.path (an .npz keyed by input name takes any name)"
    return (f"set its sample shape, e.g. {example} (the build takes the sample shapes as its profile), "
            "or give build.profiles (profile 0's opt shape is then used)")


def _range(name: str, dtype: np.dtype, spec: Mapping) -> tuple[float, float]:
    if dtype.kind == "b":
        low, high = spec.get("low", 0), spec.get("high", 2)
    elif is_float(dtype) and spec.get("low") is None and spec.get("high") is None:
        # Decision: a spec that gives only a shape (data.inputs.x.shape, or a profile's opt
        # shape) keeps the default float range; asking for a range then would contradict the
        # fix that asked for the shape.
        logger.info("input %s: no low/high in data.inputs.%s, drawing uniform %s", name, name, DEFAULT_FLOAT_RANGE)
        low, high = DEFAULT_FLOAT_RANGE
    elif "low" not in spec or "high" not in spec:
        raise UserError(
            f"data.inputs.{name} needs both low and high", f"set data.inputs.{name}.low and .high"
        )
    else:
        low, high = spec["low"], spec["high"]
    if not high > low:
        raise UserError(
            f"data.inputs.{name} has low {low} >= high {high}",
            "make high larger than low (high is exclusive for integers)",
        )
    return low, high


def _check_spec_dtype(name: str, dtype: np.dtype, spec: Mapping) -> None:
    if spec.get("dtype") is None:
        return
    try:
        requested = np.dtype(str(spec["dtype"]))
    except TypeError:
        raise UserError(f"data.inputs.{name}.dtype {spec['dtype']!r} is not a NumPy dtype",
                        f"use the model's type, {dtype}") from None
    if _kind(requested) != _kind(dtype):
        raise UserError(
            f"data.inputs.{name}.dtype is {requested} but the model input is {dtype}",
            f"set data.inputs.{name}.dtype to {dtype}"
            + (f": {override}" if (override := input_spec_override(name, {"dtype": dtype.name})) else ""),
        )
    if requested != dtype:
        logger.info("input %s: spec dtype %s, model input is %s; values are generated as %s",
                    name, requested, dtype, dtype)


def _kind(dtype: np.dtype) -> str:
    return "float" if is_float(dtype) else "integer"


def npz_files(folder: Path) -> list[Path]:
    """The input sets of a data folder: its `.npz` files, in name order."""
    return sorted((entry for entry in Path(folder).iterdir() if entry.suffix == ".npz" and entry.is_file()),
                  key=lambda entry: entry.name)


def load_inputs(path: Path, model: onnx.ModelProto | None = None,
                expected: Mapping[str, list[int | None] | None] | None = None) -> list[dict[str, np.ndarray]]:
    """Feed dicts from `.npz`, Polygraphy JSON or a folder of `.npz` files, checked against `model` when
    given. `expected`: input name -> the model's dims, when only those are known (an .npz's headers are
    checked against them before any array is read)."""
    path = Path(path)
    if path.is_dir():
        files = npz_files(path)
        if not files:
            raise UserError(f"data.path {path} is a folder with no .npz file in it",
                            "save one .npz per input set in it (numpy.savez, keys = input names), or name one file")
        if model is not None:
            expected = {value.name: input_dims.dims(value) for value in model_inputs(model)}
        for file in files:
            _check_npz_headers(file, expected or {})
        iterations = [_read_npz(file) for file in files]
        if model is not None:
            for file, feeds in zip(files, iterations):
                _check_feeds(feeds, model, str(file))
        return iterations
    if not path.is_file():
        raise UserError(f"data.path {path} does not exist or is not a file", "check data.path")
    if model is not None:
        expected = {value.name: input_dims.dims(value) for value in model_inputs(model)}
    if path.suffix == ".npz":
        _check_npz_headers(path, expected or {})
        iterations = [_read_npz(path)]
    elif path.suffix == ".json":
        iterations = _read_polygraphy_json(path)
    else:
        raise UserError(
            f"data.path {path} is neither .npz nor .json",
            "save inputs with numpy.savez (keys = input names) or polygraphy run --save-inputs",
        )
    if model is not None:
        for index, feeds in enumerate(iterations):
            _check_feeds(feeds, model, f"{path} (iteration {index})")
    return iterations


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise UserError(f"data.path {path} is not a readable .npz file ({error})",
                        unreadable_npz_fix(error)) from None


def _check_npz_headers(path: Path, expected: Mapping[str, list[int | None] | None]) -> None:
    """Refuse, before any array is read, a member whose .npy header declares more bytes than the
    member holds (a corrupt or truncated file) or a shape that does not fit the model's input.

    Decision (issue 32, item 13): a 204-byte .npz whose header declared 3.6 TiB for a model taking
    [1, 16] was reported as "out of memory ... raise ulimit": NumPy allocates what the header says
    before reading. A header NumPy cannot parse is left to numpy.load, which says why."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read = {(1, 0): np.lib.format.read_array_header_1_0,
                            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                    if read is None:
                        continue
                    shape, _, dtype = read(member)
                    held = info.file_size - member.tell()
                name = info.filename[:-len(".npy")]
                _check_declared(path, name, [int(size) for size in shape], dtype, held, expected)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        return  # numpy.load reports it (_read_npz)


def _check_declared(path: Path, name: str, shape: list[int], dtype: np.dtype, held: int,
                    expected: Mapping[str, list[int | None] | None]) -> None:
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if name in expected and not input_dims.fits(shape, expected[name]) and declared <= held:
        raise UserError(f"input {name!r} in data.path {path} has shape {shape}, the model expects "
                        f"{input_dims.shape_text(expected[name])}", "save arrays of the model's input shape")
    if name in expected and not input_dims.fits(shape, expected[name]):
        raise UserError(
            f"input {name!r} in data.path {path} declares shape {shape} ({dtype}, {_bytes(declared)}) in its "
            f"header, the model expects {input_dims.shape_text(expected[name])}: a wrong or corrupt file "
            "(nothing was loaded)", "save arrays of the model's input shape with numpy.savez")
    if declared > held:
        raise UserError(
            f"data.path {path} is corrupt or truncated: its array {name!r} declares shape {shape} ({dtype}, "
            f"{_bytes(declared)}) in its header but holds {_bytes(max(held, 0))} of data (nothing was loaded)",
            "write it again with numpy.savez (keys = input names)")


def _bytes(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _read_polygraphy_json(path: Path) -> list[dict[str, np.ndarray]]:
    from polygraphy.json import load_json

    try:
        loaded = load_json(str(path))
    except Exception as error:  # JSONDecodeError, Polygraphy's decoding errors
        raise UserError(f"data.path {path} is not a Polygraphy JSON inputs file ({error})",
                        "write it with polygraphy run --save-inputs") from None
    iterations = [loaded] if isinstance(loaded, Mapping) else loaded
    if (not isinstance(iterations, list) or not iterations
            or not all(isinstance(f, Mapping) and all(isinstance(a, np.ndarray) for a in f.values())
                       for f in iterations)):
        raise UserError(f"data.path {path} does not hold a list of {{input name: array}} dicts",
                        "write it with polygraphy run --save-inputs")
    return [dict(feeds) for feeds in iterations]


def _check_feeds(feeds: dict[str, np.ndarray], model: onnx.ModelProto, where: str) -> None:
    declared = {value.name: value for value in model_inputs(model)}
    dtypes = {name: declared_dtype(value) for name, value in declared.items()}  # non-tensor inputs fail here
    missing = sorted(set(declared) - set(feeds))
    if missing:
        raise UserError(f"{where} has no values for model inputs {missing}", "add them to the file")
    unknown = sorted(set(feeds) - set(declared))
    if unknown:
        raise UserError(f"{where} has arrays {unknown} that are not model inputs ({sorted(declared)})",
                        "rename or remove them")
    for name, value in declared.items():
        array = feeds[name] = as_declared(feeds[name], dtypes[name], name, where)
        if not input_dims.fits(array.shape, input_dims.dims(value)):
            raise UserError(
                f"input {name!r} in {where} has shape {list(array.shape)}, the model expects "
                f"{input_dims.shape_text(input_dims.labels(value))}",
                "save arrays of the model's input shape",
            )
