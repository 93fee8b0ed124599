"""`trtpipe-verify` treats a manifest as data (issue 13, items 6 and 9).

Every test runs the real `trtpipe-verify` console script in a subprocess.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.cli_helpers import run_trtpipe

SECRET = "s3cr3t-9f2e41d7c0a8"


def trtpipe_verify(target: Path, *extra: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("trtpipe-verify")), str(target), *extra]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("recorded")
    run = run_trtpipe(workdir, "+recipe=fp32")
    assert run.code == 0, run.stderr
    return run.manifest


def test_a_planted_resolver_is_never_resolved(recorded, tmp_path):
    """Reproduced: a recorded `${oc.env:SECRET_TOKEN}` was resolved by OmegaConf in the
    rebuild, and the secret was printed in the drift reason and written into the
    rebuild's manifest.json and trtpipe.log."""
    manifest = copy.deepcopy(recorded)
    manifest["config"]["build"]["tensorrt_version"] = "${oc.env:SECRET_TOKEN}"
    path = tmp_path / "planted" / "manifest.json"
    path.parent.mkdir()
    path.write_text(json.dumps(manifest))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"SECRET_TOKEN": SECRET, "TMPDIR": str(scratch)}
    for extra in (["--keep"], ["--json", "--keep"]):  # kept, so that its files can be searched below
        done = trtpipe_verify(path, *extra, cwd=tmp_path, env=env)
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert SECRET not in done.stdout and SECRET not in done.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "manifest.json" and scratch in p.parents for p in written), "no rebuild happened"
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("value", ["${oc.env:SECRET_TOKEN}", "a\\${oc.env:SECRET_TOKEN}",
                                   "\\\\${oc.env:SECRET_TOKEN}${oc.env:SECRET_TOKEN}", "${", "x\\y", "plain"])
def test_literal_config_keeps_every_recorded_string(value, monkeypatch):
    """Backslashes before `${` are OmegaConf escapes too: `a\\${..}` must not become `a\\` + secret."""
    from trtpipe.runner.manifest_read import as_literal_config

    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    cfg = as_literal_config({"build": {"tensorrt_version": value}, "list": [value]})
    assert cfg.build.tensorrt_version == value and cfg.list[0] == value


def test_the_literal_value_is_what_the_rebuild_sees(recorded, tmp_path):
    """The planted text stays the recorded literal: it is named as-is in the drift reason."""
    manifest = copy.deepcopy(recorded)
    manifest["config"]["build"]["tensorrt_version"] = "${oc.env:SECRET_TOKEN}"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    done = trtpipe_verify(path, "--json", cwd=tmp_path, env={"SECRET_TOKEN": SECRET, "TMPDIR": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    reasons = {s["name"]: s["reason"] for s in json.loads(done.stdout)["stages"]}
    assert '"${oc.env:SECRET_TOKEN}"' in reasons["build"]
    assert reasons["sanitize"] is None


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory) -> Path:
    """A run started in `workdir` with a relative model path and a relative data file."""
    from trtpipe.models import builtin_model
    from trtpipe.numerics.inputs import generate_inputs

    workdir = tmp_path_factory.mktemp("relative")
    model = builtin_model("mixed_precision")
    onnx.save(model, str(workdir / "model.onnx"))
    feeds = generate_inputs(model, {}, 3, 1)[0]
    np.savez(workdir / "feeds.npz", **feeds)
    run = run_trtpipe(workdir, "+recipe=mixed_precision", "model.path=model.onnx", "data.path=feeds.npz")
    assert run.code == 0, run.stderr
    return run.run_dir


@pytest.mark.parametrize("recorded_start", [True, False], ids=["start_dir", "old-manifest"])
def test_verify_does_not_depend_on_the_current_directory(relative_run, tmp_path, recorded_start):
    """Reproduced: the recorded relative data.path was resolved against the current
    directory, so verifying from anywhere but the original one exited 2 (data.path
    does not exist)."""
    manifest = json.loads((relative_run / "manifest.json").read_text())
    assert Path(manifest["start_dir"]) == relative_run.parent.parent
    if not recorded_start:
        del manifest["start_dir"]  # written before manifests recorded it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "manifest.json"
    target.write_text(json.dumps(manifest))
    done = trtpipe_verify(Path("manifest.json"), "--json", cwd=elsewhere, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["identical"]


def _without(*path):
    def edit(manifest):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


def _set(value, *path):
    def edit(manifest):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


MALFORMED_BYTES = {
    "empty file": b"",
    "not JSON": b"{this is not json",
    "truncated JSON": b'{"config": {"model": ',
    "non-UTF-8": b'{"config": "\xff\xfe"}',
    "a JSON list": b"[]",
    "a JSON string": b'"manifest"',
    "JSON null": b"null",
    "deeply nested": b"[" * 200000 + b"]" * 200000,
}

MALFORMED_EDITS = {
    "missing config": _without("config"),
    "missing stages": _without("stages"),
    "missing source": _without("source"),
    "config a list": _set([], "config"),
    "stages an object": _set({}, "stages"),
    "source a string": _set("model.onnx", "source"),
    "a stage a string": _set("sanitize", "stages", 0),
    "a stage without a name": _without("stages", 0, "name"),
    "a stage named by a number": _set(3, "stages", 0, "name"),
    "a stage with an empty name": _set("", "stages", 0, "name"),
    "two stages with one name": lambda m: m["stages"].append(copy.deepcopy(m["stages"][0])),
    "a key that is a number": _set(12, "stages", 0, "key"),
    "material a list": _set([], "stages", 0, "material"),
    "outputs a list": _set([], "stages", 0, "outputs"),
    "an output without sha256": lambda m: m["stages"][0]["outputs"].update({"model": {"path": "x"}}),
    "an output a string": lambda m: m["stages"][0]["outputs"].update({"model": "x"}),
    "source.path missing": _without("source", "path"),
    "source.path a number": _set(7, "source", "path"),
    "source.sha256 null": _set(None, "source", "sha256"),
    "source.builtin a list": _set(["transformer"], "source", "builtin"),
    "overrides a string": _set("+recipe=fp32", "overrides"),
    "overrides holding a number": _set([1], "overrides"),
    "tools a list": _set([], "tools"),
    "format a string": _set("one", "format"),
    "format from the future": _set(99, "format"),
    "start_dir relative": _set("outputs", "start_dir"),
    "start_dir a number": _set(5, "start_dir"),
    "config.model a list": _set([], "config", "model"),
    "config.cache a string": _set("cache", "config", "cache"),
    "an int config value a string": _set("seventeen", "config", "upgrade_opset", "target"),
    "an unknown config key": _set(True, "config", "sanitize", "bogus"),
    "config.stages unknown stage": _set(["sanitize", "no_such_stage"], "config", "stages"),
}


@pytest.mark.parametrize("case", [*MALFORMED_BYTES, *MALFORMED_EDITS, "a directory without a manifest"])
def test_every_malformed_manifest_exits_2_with_one_line(recorded, tmp_path, case):
    """Reproduced: wrong types, nameless stages, non-objects and bad configs ended in
    AttributeError/KeyError/TypeError tracebacks (exit 1) instead of exit 2 with one line."""
    target = tmp_path / "manifest.json"
    if case in MALFORMED_BYTES:
        target.write_bytes(MALFORMED_BYTES[case])
    elif case in MALFORMED_EDITS:
        manifest = copy.deepcopy(recorded)
        MALFORMED_EDITS[case](manifest)
        target.write_text(json.dumps(manifest))
    else:
        target = tmp_path / "empty-run"
        target.mkdir()
    done = trtpipe_verify(target, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trtpipe-verify: error: "), done.stderr[-2000:]
    assert "Fix:" in lines[0] and done.stdout == ""
    assert not list(tmp_path.glob("trtpipe-verify-*")), "a refused manifest must not start a rebuild"


def test_a_moved_run_directory_still_verifies(relative_run, tmp_path):
    """The manifest's own paths are absolute; a copy of the run directory verifies too."""
    copied = tmp_path / "archive" / "run"
    shutil.copytree(relative_run, copied)
    done = trtpipe_verify(copied, "--json", cwd=Path("/"), env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_old_manifest_that_gives_no_start_directory_says_so(recorded, tmp_path):
    """Old manifests keep working; when nothing tells where the run started, the cwd is
    used and stderr says so (the verdict itself is unchanged)."""
    manifest = copy.deepcopy(recorded)
    del manifest["start_dir"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    done = trtpipe_verify(tmp_path, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: the manifest records no start directory" in done.stderr
    assert "identical" in done.stdout.splitlines()[-1]
