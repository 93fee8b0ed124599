"""Sample inputs shared by every stage that runs the model.

Decision: `data` is not a stage's own config, but it changes what such a stage
computes; the runner therefore hands the *resolved* data block (absolute path
and its digest, or the generation specs with built-in defaults filled in) to
those stages as part of their config, so it is part of their cache key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from trtpipe.errors import UserError
from trtpipe.cache.hashing import sha256_file
from trtpipe.numerics.sample_values import ALLOW_KEY, check_generation_specs, check_sample_values


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
    if data.get("path"):
        given = Path(data["path"]).expanduser()
        given = given if given.is_absolute() else start_dir / given
        path = given.resolve()
        if not path.is_file():
            raise UserError(f"data.path {given} {not_a_file(given, path)}",
                            "give an .npz or Polygraphy JSON inputs file")
        resolved["path"], resolved["sha256"] = str(path), sha256_file(path)
    return resolved


def check_sample_data(data: Mapping, check_values: bool = True,
                      expected: Mapping | None = None) -> dict[str, list[list[int]]]:
    """Refuse, before any stage runs the model, sample inputs that are empty or inf/NaN
    (numerics/sample_values.py), and return their shapes (`sample_shapes`); the file is read
    here once more (stages read it again). `expected`: input name -> the source model's dims, which
    an .npz's array headers must fit before anything is read (numerics/inputs.py)."""
    from trtpipe.numerics.inputs import load_inputs

    allow = bool(data.get(ALLOW_KEY))
    if data.get("path"):
        feeds = load_inputs(Path(data["path"]), expected=expected)
        if check_values:
            check_sample_values(feeds, allow, f"data.path {data['path']}")
        return sample_shapes(data, feeds)
    if check_values:
        check_generation_specs(data.get("inputs") or {}, allow)
    return sample_shapes(data)


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
    from trtpipe.numerics.inputs import generate_inputs, load_inputs

    if data.get("path"):
        feeds = load_inputs(Path(data["path"]), model)
        where = f"data.path {data['path']}"
    else:
        feeds = generate_inputs(model, data.get("inputs") or {}, data["seed"], data["iterations"])
        where = "generated from data.inputs and the model's input shapes"
    check_sample_values(feeds, bool(data.get(ALLOW_KEY)), where)
    return feeds
