"""Sample inputs shared by every stage that runs the model.

Decision: `data` is not a stage's own config, but it changes what such a stage
computes; the runner therefore hands the *resolved* data block (absolute path
and its digest, or the generation specs with built-in defaults filled in) to
those stages as part of their config, so it is part of their cache key.

Decision (issue 30, item 5): `data.path` may name a folder of `.npz` files, one input set
each (AutoCast's calibration takes such a folder). Its block then carries `files`, each
`.npz` file's name -> sha256, in place of the one file's `sha256`: every set's digest is in
the keys of the stages that run the model, and adding, removing or rewriting one set re-runs
them. A single file's block is unchanged, so the keys of every other run stay as they were.

Decision (issue 30, item 5): `data.path` may be a list of `.npz` files and such folders, one data
set. Its block's `path` is the list of resolved entries and `files` maps each file's absolute path
to its sha256, in the order listed: the same keys as a folder's, one more data set shape. Stages read
it as a folder (runner/source_snapshot.py copies the files in order into one private folder).

Decision (issue 30, item 5): the shape of a generated dynamic input is read from the model's other
inputs or defaults (sample_dims.py) before any stage, in `with_model_ranges`, next to the ranges:
both are what the model states about its inputs, and both are recorded in the block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from trtpipe.errors import UserError
from trtpipe.cache.hashing import sha256_file
from trtpipe.numerics.sample_values import ALLOW_KEY, check_generation_specs, check_sample_values


# The tables a sample file's integer inputs index, found before any stage (`with_model_ranges`);
# dropped from the block before it reaches a stage (the file's digest already keys it).
TABLES_KEY = "_tables"
INTEGER_ELEMENT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}  # onnx.TensorProto's (u)int8..64


def resolved_data(data: Mapping, builtin: str | None, start_dir: Path, opt_shapes: Mapping | None = None) -> dict:
    """`opt_shapes`: input -> shape from the build's first profile, used where a spec gives no shape
    (validation then feeds the shapes the engine is optimised for)."""
    inputs: dict = {}
    if builtin is not None:
        from trtpipe.models import BUILTIN_INPUT_SPECS

        inputs = {name: dict(spec) for name, spec in BUILTIN_INPUT_SPECS.get(builtin, {}).items()}
    for name, spec in (data.get("inputs") or {}).items():
        inputs[name] = {**inputs.get(name, {}), **{k: v for k, v in spec.items() if v is not None}}
    for name, shape in (opt_shapes or {}).items():
        if not inputs.get(name, {}).get("shape"):
            inputs[name] = {**inputs.get(name, {}), "shape": list(shape)}
    resolved = {"seed": int(data["seed"]), "iterations": int(data["iterations"]), "inputs": inputs,
                "path": None, "sha256": None}
    if data.get(ALLOW_KEY):  # only when set: the cache keys of every other run stay as they were
        resolved[ALLOW_KEY] = True
    if isinstance(data.get("path"), (list, tuple)):
        resolved["path"], resolved["files"] = _list_digests(data["path"], start_dir)
    elif data.get("path") is not None and str(data["path"]):
        given = _given(data["path"], start_dir)
        path = given.resolve()
        if path.is_dir():
            resolved["path"], resolved["files"] = str(path), _folder_digests(given, path)
        elif not path.is_file():
            raise UserError(f"data.path {given} {not_a_file(given, path)}",
                            "give an .npz or Polygraphy JSON inputs file, or a folder of .npz files")
        else:
            resolved["path"], resolved["sha256"] = str(path), sha256_file(path)
    return resolved


def _given(entry, start_dir: Path) -> Path:
    given = Path(str(entry)).expanduser()
    return given if given.is_absolute() else start_dir / given


def _list_digests(entries, start_dir: Path) -> tuple[list[str], dict[str, str]]:
    """A list as data.path (issue 30, item 5): (each entry resolved, {every .npz file's absolute path:
    sha256}), the files of each entry in the order listed (a folder's in name order).

    Decisions: an entry is an .npz file or a folder of them; a Polygraphy JSON file holds its own list of
    sets and is named by data.path on its own (mixing would give one set two formats' checks). A file
    reached twice (listed twice, or listed and in a listed folder) is refused: it would count twice in
    the verdict. Every refusal names the entry."""
    if not entries:
        raise UserError("data.path is an empty list", "name at least one .npz file or folder of .npz files in it")
    resolved_entries, files = [], {}
    for entry in entries:
        given = _given(entry, start_dir)
        path = given.resolve()
        if path.is_dir():
            found = _folder_digests(given, path, what="data.path entry")
            found = {str(path / name): digest for name, digest in found.items()}
        elif path.is_file() and path.suffix == ".npz":
            found = {str(path): sha256_file(path)}
        elif path.is_file():
            raise UserError(f"data.path entry {given} is not an .npz file",
                            "list .npz files and folders of them; a Polygraphy JSON inputs file is data.path on its own")
        else:
            raise UserError(f"data.path entry {given} {not_a_file(given, path)}",
                            "list existing .npz files and folders of .npz files")
        twice = sorted(set(found) & set(files))
        if twice:
            raise UserError(f"data.path entry {given} repeats the input set {twice[0]}, already reached by an "
                            "earlier entry", "list each .npz file once (a listed folder includes its files)")
        resolved_entries.append(str(path))
        files.update(found)
    return resolved_entries, files


def _folder_digests(given: Path, folder: Path, what: str = "data.path") -> dict[str, str]:
    """Each input set of a data folder: its `.npz` file's name -> sha256 (a folder without one is exit 2)."""
    from trtpipe.numerics.inputs import npz_files

    files = npz_files(folder)
    if not files:
        raise UserError(f"{what} {given} is a folder with no .npz file in it",
                        "save one .npz per input set in it (numpy.savez, keys = input names), or name one file")
    return {file.name: sha256_file(file) for file in files}


def model_ranges(data: dict, model_path: Path, model_sha256: str, index_dir: Path,
                 sequence_length: int = 128) -> tuple[dict, dict, dict]:
    """with_model_ranges, remembered per model digest for generated data (memo/model_inputs.py):
    the same answer without loading the model. The ranges come back as ReadRange-like records
    (`low`, `high`, `reason`: what the runner prints)."""
    from types import SimpleNamespace

    from trtpipe.memo import model_inputs

    if data.get("path"):
        return with_model_ranges(data, model_path, sequence_length)
    key = model_inputs.memo_key(model_sha256, data, sequence_length)
    known = model_inputs.recall(index_dir, key) if key else None
    if known is not None:
        return known["data"], {name: SimpleNamespace(**found) for name, found in known["read"].items()}, known["shaped"]
    model = _load_unchecked(model_path)
    if model is None:
        return data, {}, {}
    answer = _ranges_of(model, data, sequence_length)
    if key:
        completed, read, shaped = answer
        model_inputs.remember(index_dir, key, {"data": completed, "read": {name: vars(found) for name, found in
                                                                          read.items()}, "shaped": shaped})
    return answer


def with_model_ranges(data: dict, model_path: Path, sequence_length: int = 128) -> tuple[dict, dict, dict]:
    """Before any stage: the data block with the range the model states for each generated integer
    input that has none (numerics/input_ranges.py; the reason rides along as `from_model`, so the
    decision is in the keys and the manifest's key material), the shape the model's other inputs or
    the defaults give each dynamic input without one (sample_dims.py; `shape_from`), and the table
    ranges that sample files are checked against (`check_sample_data`). Every integer input without a
    range is one error here. Returns (data, {input: ReadRange}, {input: shape line}) of the decisions
    to print."""
    model = _load_unchecked(model_path)
    if model is None:
        return data, {}, {}
    return _ranges_of(model, data, sequence_length)


def _load_unchecked(model_path: Path):
    """The model without its weights, or None: sanitize reports an unreadable model in its own words."""
    import onnx

    try:
        return onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return None


def _ranges_of(model, data: dict, sequence_length: int) -> tuple[dict, dict, dict]:
    from trtpipe.numerics.input_ranges import read_ranges
    from trtpipe.numerics.inputs import integer_specs, model_inputs
    from trtpipe.sample_dims import filled_shapes, shape_line

    inputs = model_inputs(model)
    if data.get("path"):
        names = [value.name for value in inputs if value.type.tensor_type.elem_type in INTEGER_ELEMENT_TYPES]
        return {**data, TABLES_KEY: read_ranges(model, names)}, {}, {}
    specs, read = integer_specs(model, data.get("inputs") or {})
    for name, found in read.items():
        specs[name] = {**specs[name], "from_model": found.reason}
    # Token inputs: the integer inputs the model states a range for, whether or not the user gave one.
    integers = [value.name for value in inputs if value.type.tensor_type.elem_type in INTEGER_ELEMENT_TYPES]
    tokens = list(read) + [name for name in read_ranges(model, [n for n in integers if n not in read])]
    shaped = {}
    by_name = {value.name: value for value in inputs}
    for name, (shape, reasons) in filled_shapes(inputs, specs, tokens, sequence_length).items():
        specs[name] = {**(specs.get(name) or {}), "shape": shape, "shape_from": reasons}
        shaped[name] = shape_line(shape, reasons, by_name[name])
    _refuse_unsized_inputs(inputs, specs, sequence_length)
    return {**data, "inputs": specs}, read, shaped


def _refuse_unsized_inputs(inputs, specs: Mapping, sequence_length: int) -> None:
    """Every generated input whose dynamic dims neither the user, a profile nor sample_dims.py sized,
    in one error before any stage. Decision: found here, not when the precision stage draws the
    sample (after sanitize and the opset upgrade had run, one input per attempt), and the example
    sizes a dynamic dim as the defaults would (1 for the first, `data.sequence_length` for the
    others), never 1 everywhere: a one-step sequence or a 1x1 image passes on degenerate data."""
    from trtpipe.numerics.inputs import input_shape_override
    from trtpipe.onnxmodel import input_dims

    unsized = [value for value in inputs
               if not (specs.get(value.name) or {}).get("shape") and input_dims.is_dynamic(input_dims.dims(value))]
    if not unsized:
        return
    problem = (f"model input {unsized[0].name!r} has dynamic dimensions (shape "
               f"{input_dims.shape_text(input_dims.labels(unsized[0]))})" if len(unsized) == 1 else
               "model inputs " + ", ".join(f"{value.name!r} {input_dims.shape_text(input_dims.labels(value))}"
                                           for value in unsized) + " have dynamic dimensions")
    examples = []
    for value in unsized:
        declared = input_dims.dims(value)
        example = None if declared is None else input_shape_override(
            value.name, [size if size is not None else (1 if axis == 0 else sequence_length)
                         for axis, size in enumerate(declared)])
        if example is None:  # an unknown rank, or a name the override grammar cannot spell
            raise UserError(f"{problem} that nothing sizes, so there is no sample to draw",
                            "give the sample inputs in data.path (an .npz keyed by input name)")
        examples.append(example)
    raise UserError(f"{problem} that nothing sizes, so there is no sample to draw",
                    f"set the sample shape to your real sizes, e.g. {' '.join(examples)} (the build takes the "
                    "sample shapes as its profile), or give data.path or build.profiles")


def check_sample_data(data: Mapping, check_values: bool = True,
                      expected: Mapping | None = None) -> dict[str, list[list[int]]]:
    """Refuse, before any stage runs the model, sample inputs that are empty or inf/NaN
    (numerics/sample_values.py), or ids outside the table they index, and return their shapes
    (`sample_shapes`); the file is read here once more (stages read it again). `expected`: input
    name -> the source model's dims, which an .npz's array headers must fit before anything is read
    (numerics/inputs.py)."""
    allow = bool(data.get(ALLOW_KEY))
    if data.get("path"):
        from trtpipe.numerics.input_ranges import check_table_indices  # NumPy and onnx: only for files

        feeds = []
        for part, where in _sample_parts(data, expected):  # a list's values are named by their file
            if check_values:
                check_sample_values(part, allow, where)
                check_table_indices(part, data.get(TABLES_KEY) or {}, where)
            feeds += part
        return sample_shapes(data, feeds)
    if check_values:
        check_generation_specs(data.get("inputs") or {}, allow)
    return sample_shapes(data)


def _sample_parts(data: Mapping, expected: Mapping | None):
    """(feed dicts, where they come from) per file of a list as data.path, else one part."""
    from trtpipe.numerics.inputs import load_inputs

    if isinstance(data["path"], (list, tuple)):
        for file in data["files"]:
            yield load_inputs(Path(file), expected=expected), f"data.path file {file}"
    else:
        yield load_inputs(Path(data["path"]), expected=expected), f"data.path {data['path']}"


def load_sample_files(data: Mapping, model=None, expected: Mapping | None = None) -> list[dict]:
    """The feed dicts of `data.path`: its file or folder, or every file of a list, in order (each
    file's errors name that file)."""
    from trtpipe.numerics.inputs import load_inputs

    if isinstance(data["path"], (list, tuple)):
        return [feeds for file in data["files"] for feeds in load_inputs(Path(file), model, expected)]
    return load_inputs(Path(data["path"]), model, expected)


def sample_shapes(data: Mapping, feeds: list[Mapping] | None = None) -> dict[str, list[list[int]]]:
    """Input name -> the distinct shapes of the sample data, in order of first occurrence: the
    arrays of `data.path` (`feeds`, as read), or the `shape` of each generated spec that gives one
    (every iteration has it). A generated input without a shape has none here: its size is the
    model's (static) or unknown (a dynamic one: the build then needs build.profiles)."""
    shapes: dict[str, list[list[int]]] = {}
    if data.get("path"):
        for iteration in feeds or ():
            for name, array in iteration.items():
                shape = [int(v) for v in getattr(array, "shape", ())]
                if shape not in shapes.setdefault(name, []):
                    shapes[name].append(shape)
        return shapes
    for name, spec in (data.get("inputs") or {}).items():
        if isinstance(spec, Mapping) and spec.get("shape"):
            shapes[name] = [[int(v) for v in spec["shape"]]]
    return shapes


def sample_data_place(data: Mapping) -> str:
    """Where the sample data comes from, for messages."""
    if isinstance(data.get("path"), (list, tuple)):
        return f"data.path, a list of {len(data['path'])} entries ({len(data['files'])} .npz input sets)"
    if data.get("files"):
        return f"data.path {data['path']} ({len(data['files'])} .npz input sets)"
    return f"data.path {data['path']}" if data.get("path") else "generated from data.inputs"


def not_a_file(given: Path, resolved: Path) -> str:
    """Why `given` (resolving to `resolved`) is not a regular file, in words.

    Decision (issue 22, item 16): a folder, a FIFO or a link to /dev/zero was reported as
    "does not exist", sending the user to look for a file that is there."""
    import os
    import stat

    from trtpipe.onnxmodel.external_files import file_kind

    link = f" (a symbolic link to {resolved})" if os.path.islink(given) else ""
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        return f"is a symbolic link to {resolved}, which does not exist" if link else "does not exist"
    except OSError as error:
        return f"cannot be read ({os.strerror(error.errno or 0)})"
    return f"is {file_kind(mode)}{link}, not a regular file" if not stat.S_ISREG(mode) else "is not a file"


def sample_feeds(model, data: Mapping) -> list[dict]:
    """The feed dicts described by a resolved data block (never empty, finite unless allowed)."""
    from trtpipe.numerics.inputs import generate_inputs

    if data.get("path"):
        feeds = load_sample_files(data, model)
        where = f"data.path {data['path']}"
    else:
        feeds = generate_inputs(model, data.get("inputs") or {}, data["seed"], data["iterations"])
        where = "generated from data.inputs and the model's input shapes"
    check_sample_values(feeds, bool(data.get(ALLOW_KEY)), where)
    return feeds
