"""Property-based fuzzing of trtpipe's inputs from outside (issue 13, item 12): malformed
manifests, planted cache records and config overrides. Strategies and properties live in
bench/fuzz/fuzz_cases.py (shared with `python -m bench.fuzz`, which runs them longer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis", reason="pip install -e '.[test]' (the fuzz tests need Hypothesis)")

from tests.fuzz.bounded import BOUNDED  # noqa: E402

from hypothesis import given, settings  # noqa: E402  (after the importorskip)

from bench.fuzz import fuzz_cases as fc  # noqa: E402


@pytest.fixture(scope="module")
def base_manifest(tmp_path_factory) -> dict:
    return fc.recorded_manifest(tmp_path_factory.mktemp("recorded"))


@pytest.fixture(scope="module")
def base_record(tmp_path_factory) -> dict:
    return fc.genuine_record(tmp_path_factory.mktemp("genuine"))


def test_malformed_manifests_end_in_a_verdict_or_a_user_error(base_manifest, fresh_dir):
    @settings(BOUNDED, max_examples=15)
    @given(fc.manifests(base_manifest))
    def case(manifest):
        assert fc.check_manifest(manifest, fresh_dir()) is None, json.dumps(manifest, default=str)[:500]
    case()


def test_the_unmutated_manifest_verifies_identical(base_manifest, fresh_dir):
    """The property above must be able to fail: the genuine manifest rebuilds, the rest is mutation."""
    from trtpipe.verify import verify

    workdir = fresh_dir()
    (workdir / "manifest.json").write_text(json.dumps(base_manifest))
    assert verify(workdir / "manifest.json")["identical"]


@pytest.mark.parametrize("key", ["validate.tolerance.max_abs", "data.seed", "sanitize.infer_shapes"])
def test_a_recorded_interpolation_in_a_typed_field_is_a_user_error(base_manifest, fresh_dir, monkeypatch, key):
    """Found by bench/fuzz/fuzz.py: `${oc.env:...}` recorded in a float (int, bool) field ended
    trtpipe-verify with an InterpolationValidationError traceback instead of exit 2."""
    from trtpipe.errors import UserError
    from trtpipe.verify import verify

    monkeypatch.setenv(fc.SECRET_VAR, fc.SECRET)
    manifest = json.loads(json.dumps(base_manifest))
    section, *middle, last = key.split(".")
    node = manifest["config"][section]
    for step in middle:
        node = node[step]
    node[last] = "${oc.env:" + fc.SECRET_VAR + "}"
    path = fresh_dir() / "manifest.json"
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=key.replace(".", r"\.")) as raised:
        verify(path)
    assert fc.SECRET not in f"{raised.value} {raised.value.fix}"


@pytest.mark.parametrize("profiles", [[False, "x", True], [{"input": True}], [{"input": {"min": [1]}}]])
def test_a_recorded_malformed_profile_is_a_user_error(base_manifest, fresh_dir, profiles):
    """Found by bench/fuzz/fuzz.py (manifest kind, session 7): `build.profiles` recorded as
    [False, 'Ð', True] ended trtpipe-verify with AttributeError ('bool' has no 'items'): the
    validation shapes were read from the first profile before the build stage checks profiles."""
    from trtpipe.errors import UserError
    from trtpipe.verify import verify

    manifest = json.loads(json.dumps(base_manifest))
    manifest["config"]["build"]["profiles"] = profiles
    path = fresh_dir() / "manifest.json"
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"build\.profiles\[0\]"):
        verify(path)


@pytest.mark.parametrize("edit", ["secret", "stages_int", "config_list"])
def test_malformed_manifests_through_the_real_command(base_manifest, tmp_path, edit):
    """A few cases through the `trtpipe-verify` console script: exit 0, 1 or 2 (one line), no
    traceback, the planted ${oc.env:...} never resolved (a build value does not reach sanitize's key)."""
    manifest = json.loads(json.dumps(base_manifest))
    if edit == "secret":
        manifest["config"]["build"]["tensorrt_version"] = "${oc.env:" + fc.SECRET_VAR + "}"
    elif edit == "stages_int":
        manifest["stages"] = 7
    else:
        manifest["config"]["stages"] = [["sanitize"], {"x": "${oc.env:" + fc.SECRET_VAR + "}"}]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, fc.SECRET_VAR: fc.SECRET, "TMPDIR": str(scratch)}
    command = [str(Path(sys.executable).with_name("trtpipe-verify")), str(path), "--keep"]  # files searched below
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in ((0, 1) if edit == "secret" else (2,)), done.stdout + done.stderr
    assert "Traceback" not in done.stderr and fc.SECRET not in done.stdout + done.stderr
    if done.returncode == 2:
        assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and fc.SECRET.encode() in p.read_bytes()]


def test_planted_cache_records_are_discarded_and_rebuilt(base_record, fresh_dir):
    @settings(BOUNDED, max_examples=30)
    @given(fc.cache_records(base_record))
    def case(text):
        assert fc.check_cache_record(text, fresh_dir()) is None, text[:500]
    case()


def test_the_cache_check_catches_a_record_pointing_outside(base_record, fresh_dir):
    """The property above can fail: a record naming a file outside the entry must be discarded."""
    record = json.loads(json.dumps(base_record))
    record["outputs"]["model"]["file"] = "../../../../secret.txt"
    assert fc.check_cache_record(json.dumps(record), fresh_dir()) is None
    assert fc.check_cache_record(json.dumps(base_record), fresh_dir()) is None  # genuine: a hit


def test_config_overrides_end_in_success_or_a_user_error(fresh_dir):
    keys = fc.schema_keys()
    assert "precision.default" in keys and "validate.tolerance.max_abs" in keys

    @settings(BOUNDED, max_examples=15)
    @given(fc.override_lists(keys))
    def case(overrides):
        assert fc.check_overrides(overrides, fresh_dir()) is None, overrides
    case()


@pytest.mark.parametrize("overrides", [["precision.default=7"], ["stages=[sanitize,sanitize]"],
                                       ["validate.tolerance.max_abs=nan"], ["+precison.default=fp16"],
                                       ["data.inputs={x:{y:[]}}"], ["model.builtin=[1]"],
                                       ["validate.tolerance.rel_l2=${nope}"], ["precision.default=${nope}"]])
def test_known_bad_overrides_are_user_errors(overrides):
    """The `${nope}` cases were found by bench/fuzz/fuzz.py: an unresolvable interpolation in a value
    check_config reads ended `trtpipe.api.compose` with an InterpolationKeyError."""
    from trtpipe.api import compose
    from trtpipe.config.check import check_config
    from trtpipe.errors import UserError

    with pytest.raises(UserError):
        check_config(compose(overrides), overrides)
