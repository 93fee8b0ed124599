"""The `verify` fuzz kind (issue 32): hostile manifests and run directories for trtpipe-verify.

A real run (the built-in `transformer`, sanitize and upgrade_opset: two different model files)
is recorded once per process. Each case copies its run directory, applies one mutation drawn by
Hypothesis and calls `trtpipe.verify.verify` on the copy. Every mutation alters something the
verdict rests on, so the property is: never `identical`; a `UserError` (exit 2) whose message is
one line, or a drifted verdict; any other exception is a defect.

Mutations (`MUTATIONS`), each only where it changes the recorded run:
- remove: a field verify relies on deleted (the stage list, a stage record, its name, status,
  key, outputs, an output's path or sha256, the config, the source, the run's status and exit
  code). Until session 11 the run's status and exit code were left out (verify compared them only
  where recorded, a manifest without them taken for one written before they were); seeds 1-3 of
  commit 31b2f35 ran that way. Verify now refuses a manifest without them
  (trtpipe/runner/manifest_trust.py `check_outcome`), and every seed was run again with them.
- flip: an outcome changed: a stage's status to another outcome (`ran` and `cached` are the
  same outcome, so never between them), the run's status, its exit code.
- sha: one hex digit of a recorded sha256 or key changed.
- swap: the two stages' model files exchanged in the run directory.
- edit: one byte of a run-directory file changed.
- outside: an output's path leading out of the run directory (absolute, `..`, a symbolic link
  to a copy of the right file outside it: the runner writes copies, never links).
- wrong_type: one of the fields above given a value of another type.

Decision: the rebuild uses a fresh cache per case, as `trtpipe-verify` does by default; the
recorded cache is never read or written.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

MUTATIONS = ("remove", "flip", "sha", "swap", "edit", "outside", "wrong_type")
OUTCOMES = ("failed", "skipped", "deferred", "interrupted")
RUN_STATUS = ("failed", "interrupted", "error")
EXIT_CODES = (1, 2, 130, 143)
OTHER_TYPES = (0, 1.5, [], {}, None, True, "x", [1, 2], {"a": 1})
OUTSIDE = ("/etc/passwd", "../outside.onnx", "sanitize/../../outside.onnx", "./../x", "link.onnx", "sanitize/")
_RECORDED: dict = {}


def recorded_run(root: Path) -> Path:
    """The real run directory every case starts from (recorded once per process)."""
    if "run" not in _RECORDED:
        from trtpipe.api import run

        run_dir = root / "verify-base" / "run"
        run(["model.builtin=transformer", "stages=[sanitize,upgrade_opset]",
             f"cache.dir={root / 'verify-base' / 'cache'}"], run_dir=run_dir)
        first, second = (run_dir / s / "model.onnx" for s in ("sanitize", "upgrade_opset"))
        assert first.read_bytes() != second.read_bytes(), "the base run's two model files must differ (swap)"
        _RECORDED["run"] = run_dir
    return _RECORDED["run"]


def cases():
    """A mutation and the numbers that pick its target and value."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries({"mutation": st.sampled_from(MUTATIONS), "pick": st.integers(0, 10_000),
                                  "value": st.integers(0, 10_000), "byte": st.integers(1, 255)})


def _fields(manifest: dict) -> list[tuple]:
    """Paths of the fields verify relies on (remove and wrong_type draw from these)."""
    paths: list[tuple] = [("stages",), ("config",), ("source",)]
    for i, stage in enumerate(manifest["stages"]):
        paths += [("stages", i), ("stages", i, "name"), ("stages", i, "status"), ("stages", i, "key"),
                  ("stages", i, "outputs")]
        for kind in stage["outputs"]:
            paths += [("stages", i, "outputs", kind, "path"), ("stages", i, "outputs", kind, "sha256")]
    return paths


def _parent(manifest: dict, path: tuple):
    node = manifest
    for part in path[:-1]:
        node = node[part]
    return node


def mutate(case: dict, run_dir: Path, outside: Path) -> str:
    """Apply `case` to the copied run directory; returns what was done (for the defect line)."""
    manifest_file = run_dir / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    pick, value, mutation = case["pick"], case["value"], case["mutation"]
    stages = manifest["stages"]
    stage = stages[pick % len(stages)]
    kinds = sorted(stage["outputs"])
    output = stage["outputs"][kinds[value % len(kinds)]]
    files = sorted({o["path"] for s in stages for o in s["outputs"].values()})
    if mutation in ("remove", "wrong_type"):
        fields = _fields(manifest) + [("status",), ("exit_code",)]
        path = fields[pick % len(fields)]
        parent = _parent(manifest, path)
        if mutation == "remove":
            del parent[path[-1]]
            done = f"removed {'.'.join(map(str, path))}"
        else:
            old = parent[path[-1]]
            choices = [v for v in OTHER_TYPES if type(v) is not type(old)]
            parent[path[-1]] = copy.deepcopy(choices[value % len(choices)])
            done = f"{'.'.join(map(str, path))} = {parent[path[-1]]!r}"
    elif mutation == "flip":
        which = value % 3
        if which == 0:
            stage["status"] = OUTCOMES[pick % len(OUTCOMES)]
            done = f"stage {stage['name']} status = {stage['status']}"
        elif which == 1:
            manifest["status"] = RUN_STATUS[pick % len(RUN_STATUS)]
            done = f"run status = {manifest['status']}"
        else:
            manifest["exit_code"] = EXIT_CODES[pick % len(EXIT_CODES)]
            done = f"exit_code = {manifest['exit_code']}"
    elif mutation == "sha":
        targets = [(output, "sha256"), (stage, "key")]
        holder, key = targets[value % 2]
        digit = pick % 64
        old = holder[key]
        holder[key] = old[:digit] + ("0" if old[digit] != "0" else "1") + old[digit + 1:]
        done = f"{stage['name']}.{key} digit {digit} changed"
    elif mutation == "swap":
        first, second = (run_dir / name for name in ("sanitize/model.onnx", "upgrade_opset/model.onnx"))
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)
        done = "sanitize/model.onnx <-> upgrade_opset/model.onnx"
    elif mutation == "edit":
        target = run_dir / files[pick % len(files)]
        data = bytearray(target.read_bytes())
        data[value % len(data)] ^= case["byte"]
        target.write_bytes(bytes(data))
        done = f"byte {value % len(data)} of {files[pick % len(files)]} ^= {case['byte']}"
    else:  # outside
        where = OUTSIDE[value % len(OUTSIDE)]
        if where == "link.onnx":   # a link to a copy of the right file, outside the run directory
            shutil.copy(run_dir / output["path"], outside / "copy.onnx")
            (run_dir / "link.onnx").symlink_to(outside / "copy.onnx")
        elif where.startswith(".."):
            shutil.copy(run_dir / output["path"], outside / where.rsplit("/", 1)[-1])
        output["path"] = where
        done = f"{stage['name']} output path = {where!r}"
    manifest_file.write_text(json.dumps(manifest))
    return done


def check_verify(case: dict, workdir: Path) -> str | None:
    """None, or the defect: `identical` for a mutated run, a multi-line error, another exception."""
    from trtpipe.errors import UserError
    from trtpipe.verify import verify

    base = _RECORDED["run"]
    run_dir = workdir / "case" / "run"
    outside = workdir / "case"
    shutil.copytree(base, run_dir, symlinks=True)
    done = mutate(case, run_dir, outside)
    try:
        verdict = verify(run_dir)
    except UserError as error:
        line = f"{error} Fix: {error.fix}" if error.fix else str(error)
        return f"a UserError of more than one line after {done}: {line[:200]!r}" if "\n" in line else None
    except Exception as error:  # noqa: BLE001 - any other exception is the defect we look for
        return f"{type(error).__name__} after {done}: {str(error)[:200]}"
    if verdict["identical"]:
        return f"identical after {done}"
    return None
