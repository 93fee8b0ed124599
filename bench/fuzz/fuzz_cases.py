"""Fuzz cases (issue 13, item 12): Hypothesis strategies for malformed manifests, cache
records and config overrides, and the property each case must keep.

Each `check_<kind>(case, workdir)` returns None when the property holds, else a one-line
description of the defect. The pytest suite (tests/fuzz/) and `python -m bench.fuzz`
share these strategies and checks. Mutated ONNX graphs live in bench/fuzz/fuzz_graphs.py.

Decisions:
- A property is "ends in success or a UserError (exit 2), never another exception":
  anything else is a defect, reported with its type and message, never raised.
- Every case runs in its own fresh `workdir`; a file appearing or changing anywhere in
  `workdir` outside the run directory and the cache is a defect (snapshot before/after).
- Planted `${oc.env:...}` strings name TRTPIPE_FUZZ_SECRET, whose value must never show up
  in a result, an error message or a written file (the manifest is data, not config).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st

SECRET_VAR = "TRTPIPE_FUZZ_SECRET"
SECRET = "fuzz-secret-5d1c0e7a"
PLANTED = ["${oc.env:" + SECRET_VAR + "}", "${oc.env:" + SECRET_VAR + ",x}", "${now:%Y}", "${model.path}",
           "\\${oc.env:" + SECRET_VAR + "}", "${", "../../../../etc/passwd", "/tmp", "..", ".", "a/b", ""]

# -- shared JSON strategies -----------------------------------------------------------------------

texts = st.one_of(st.sampled_from(PLANTED), st.text(max_size=12))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)), max_leaves=12)


def _paths(value, prefix=()):
    """Every path (tuple of keys/indices) inside a JSON value, the root included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@st.composite
def mutated_json(draw, base, max_mutations: int = 3):
    """`base` with 1..max_mutations random edits: a value replaced by random JSON, a key
    removed, an extra key added, or the whole document replaced."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if not path:
            if action == "replace":
                doc = draw(json_values)
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(texts)] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return doc


def _files(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    found = {}
    for path in root.rglob("*"):
        if any(path == s or s in path.parents for s in skip):
            continue
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _outside_changes(before: dict, after: dict) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def cache_problems(root: Path) -> str | None:
    """Why the cache at `root` does not verify: an entry whose record breaks the schema or
    whose files do not match their recorded digests, or a leftover temporary."""
    from trtpipe.cache.entry_schema import record_problem
    from trtpipe.cache.hashing import sha256_file

    for record_path in sorted((root / "entries").glob("*/*/entry.json")):
        entry = record_path.parent
        if entry.parent.is_symlink() or entry.is_symlink():
            continue  # behind a link is not the cache's: trtpipe refuses it and leaves it alone (issue 22 item 2)
        try:
            record = json.loads(record_path.read_text())
        except ValueError as error:
            return f"{record_path}: {error}"
        problem = record_problem(record, entry.parent.name, entry.name, entry)
        if problem:
            return f"{entry}: {problem}"
        for name, digest in record["files"].items():
            if sha256_file(entry / name) != digest:
                return f"{entry / name}: digest differs from the record"
    leftovers = [p.name for p in (root / "tmp").glob("*")] if (root / "tmp").is_dir() else []
    return f"temporaries left in {root / 'tmp'}: {leftovers}" if leftovers else None


def _secret_in_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()]


# -- a. manifests ---------------------------------------------------------------------------------

_RECORDED: dict = {}


def recorded_manifest(workdir: Path) -> dict:
    """A real manifest of a one-stage run (recorded once per process, kept in memory)."""
    if "manifest" not in _RECORDED:
        from trtpipe.api import run

        result = run(["model.builtin=mixed_precision", "stages=[sanitize]", f"cache.dir={workdir / 'cache'}"],
                     run_dir=workdir / "recorded")
        _RECORDED["manifest"] = result.manifest
    return _RECORDED["manifest"]


def manifests(base: dict):
    return mutated_json(base)


def check_manifest(manifest, workdir: Path) -> str | None:
    """`trtpipe-verify`'s in-process entry point: a verdict or a UserError; no secret resolved."""
    from trtpipe.errors import UserError
    from trtpipe.verify import verify

    path = workdir / "planted" / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    before = _files(workdir, (scratch,))
    saved_tmp, saved_env = tempfile.tempdir, os.environ.get(SECRET_VAR)
    tempfile.tempdir, os.environ[SECRET_VAR] = str(scratch), SECRET
    try:
        shown = json.dumps(verify(path, keep=True), default=str)  # kept: its files are checked below
    except UserError as error:
        shown = f"{error} {error.fix}"
    except Exception as error:  # noqa: BLE001 - any other exception is the defect we look for
        return f"{type(error).__name__}: {str(error)[:200]}"
    finally:
        tempfile.tempdir = saved_tmp
        if saved_env is None:
            os.environ.pop(SECRET_VAR, None)
        else:
            os.environ[SECRET_VAR] = saved_env
    if SECRET in shown:
        return "the planted ${oc.env:...} was resolved and shown"
    leaked = _secret_in_files(scratch)
    if leaked:
        return f"the planted secret was written to {leaked[0]}"
    changed = _outside_changes(before, _files(workdir, (scratch,)))
    return f"verify wrote outside its temporary directory: {changed[:3]}" if changed else None


# -- b. cache records -----------------------------------------------------------------------------

MATERIAL = {"stage": "sanitize", "version": "1", "config": {}, "inputs": {"model": "0" * 64}, "tools": {}}


def _write(text: str):
    def compute(out_dir: Path) -> dict:
        (out_dir / "model.bin").write_text(text)
        return {"outputs": {"model": "model.bin"}, "summary": f"wrote {text}"}
    return compute


def genuine_record(workdir: Path) -> dict:
    from trtpipe.cache.cache import ArtifactCache, cache_key

    root = workdir / "genuine-cache"
    ArtifactCache(root).get_or_compute("sanitize", MATERIAL, _write("genuine"))
    record = json.loads((root / "entries" / "sanitize" / cache_key(MATERIAL) / "entry.json").read_text())
    shutil.rmtree(root)
    return record


def cache_records(base: dict):
    """entry.json texts: the genuine record mutated, random JSON, or garbage bytes."""
    return st.one_of(mutated_json(base).map(json.dumps), json_values.map(json.dumps),
                     st.binary(max_size=40).map(lambda b: b.decode("latin-1")))


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check_cache_record(text: str, workdir: Path) -> str | None:
    """A planted entry.json, read as the pipeline reads it (the stage's outputs required): a
    warning and a rebuild (or a hit on an equivalent valid record),
    nothing read/linked/written outside the entry and the run dir, the cache verifies."""
    from trtpipe.errors import UserError
    from trtpipe.cache.cache import ArtifactCache, cache_key
    from trtpipe.cache.publish import RunDirPublisher

    root, run_dir = workdir / "cache", workdir / "run"
    secret = workdir / "secret.txt"
    secret.write_text("the user's secret")
    ArtifactCache(root).get_or_compute("sanitize", MATERIAL, _write("genuine"))
    entry = root / "entries" / "sanitize" / cache_key(MATERIAL)
    (entry / "entry.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    before = _files(workdir, (root, run_dir))
    handler = _Warnings()
    logger = logging.getLogger("trtpipe")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.WARNING if not level or level > logging.WARNING else level)
    try:
        result = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, _write("rebuilt"), required=("model",))
        publisher = RunDirPublisher(run_dir)
        publisher.publish(result.entry, "sanitize")
        publisher.finish(succeeded=True)
        again = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, _write("third"), required=("model",))
    except UserError:
        return None
    except Exception as error:  # noqa: BLE001
        return f"{type(error).__name__}: {str(error)[:200]}"
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    output = result.entry.output_path("model")
    if output.parent != entry:
        return f"the output {output} is outside the entry"
    content = output.read_text()
    if result.status == "ran" and not any("discard" in line for line in handler.lines):
        return "the record was rebuilt without a warning"
    if content not in ("genuine", "rebuilt") or (result.status == "ran") != (content == "rebuilt"):
        return f"status {result.status} with output {content!r}"
    published = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    if published != ["sanitize/model.bin"] or (run_dir / "sanitize" / "model.bin").read_text() != content:
        return f"the run directory holds {published}"
    if secret.read_text() != "the user's secret" or os.stat(secret).st_nlink != 1:
        return "the file outside the cache was written or linked"
    if again.status != "cached" or again.entry.output_path("model").read_text() != content:
        return f"the rebuilt entry is not used the next time ({again.status})"
    changed = _outside_changes(before, _files(workdir, (root, run_dir)))
    if changed:
        return f"written outside the cache and run dir: {changed[:3]}"
    return cache_problems(root)


# -- c. config overrides --------------------------------------------------------------------------

def schema_keys() -> list[str]:
    from omegaconf import OmegaConf

    from trtpipe.config.schema import TrtpipeConfig

    def walk(node, prefix):
        for key in node:
            value = node._get_node(key)
            path = f"{prefix}{key}"
            if OmegaConf.is_dict(value) and len(value):
                yield from walk(value, path + ".")
            else:
                yield path
    return sorted(walk(OmegaConf.structured(TrtpipeConfig), ""))


def _typo(key: str, draw) -> str:
    if len(key) < 2:
        return key + "x"
    at = draw(st.integers(0, len(key) - 1))
    kind = draw(st.sampled_from(["drop", "double", "swap", "case"]))
    if kind == "drop":
        return key[:at] + key[at + 1:]
    if kind == "double":
        return key[:at] + key[at] + key[at:]
    if kind == "swap" and at + 1 < len(key):
        return key[:at] + key[at + 1] + key[at] + key[at + 2:]
    return key[:at] + key[at].swapcase() + key[at + 1:]


override_values = st.one_of(
    st.sampled_from(["null", "true", "false", "[]", "{}", "[a,b]", "{a:1}", "-1", "0", "1e309", "nan", "inf",
                     "fp16", "bf16", "fp32", "'x y'", "${oc.env:" + SECRET_VAR + "}", "${nope}", "[sanitize]",
                     "[sanitize,sanitize]", "[validate,sanitize]", "regex", "exact", "[[1]]", "{x:{y:[]}}"]),
    st.integers(-10**20, 10**20).map(str), st.floats(allow_nan=False).map(repr),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=10))


@st.composite
def override_lists(draw, keys: list[str]):
    out = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        if draw(st.integers(0, 3)) == 0:
            key = _typo(key, draw)
        prefix = draw(st.sampled_from(["", "", "", "+", "++", "~"]))
        out.append(f"{prefix}{key}" if prefix == "~" and draw(st.booleans()) else f"{prefix}{key}={draw(override_values)}")
    return out


def check_overrides(overrides: list[str], workdir: Path) -> str | None:
    from trtpipe.api import compose
    from trtpipe.config.check import check_config
    from trtpipe.errors import UserError

    before = _files(workdir, ())
    try:
        check_config(compose(overrides), overrides)
    except UserError:
        pass
    except Exception as error:  # noqa: BLE001
        return f"{type(error).__name__}: {str(error)[:200]}"
    changed = _outside_changes(before, _files(workdir, ()))
    return f"composing wrote files: {changed[:3]}" if changed else None
