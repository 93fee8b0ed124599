"""Dynamic shapes in one step (issue 24, item 3), through the real command line.

A real dynamic-batch graph (tests/test_cli_dynamic_inputs.small_model, batch -1) and a
real .npz of batch 2: `trtpipe model.path=m.onnx data.path=samples.npz` runs every stage,
the build deferred with the data's shapes as its profile (min = opt = max), said in the
console and written in trtexec.txt. Every printed override is pasted, as a shell splits
it, into the next run, which must reach the end (exit 0): a fix that leads to another
error is a defect.
"""

from __future__ import annotations

import re
import shlex

import numpy as np
import onnx
import pytest

from tests.cli_helpers import cache_entries, run_trtpipe
from tests.test_cli_dynamic_inputs import run_pasting_fixes, small_model, token_model

DERIVED = "profile from the sample data (min = opt = max): x [2,3,8,8]"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("one_step")
    onnx.save(small_model(-1), str(directory / "m.onnx"))
    rng = np.random.RandomState(0)
    for name, batch in (("samples", 2), ("samples_b2_other", 2), ("samples_b3", 3)):
        np.savez(directory / f"{name}.npz", x=rng.rand(batch, 3, 8, 8).astype(np.float32))
    return directory


def quoted_overrides(text: str) -> list[str]:
    return [word for quoted in re.findall(r"'[^']*'", text) for word in shlex.split(quoted)]


def shapes_in(run) -> list[str]:
    commands = (run.run_dir / "build" / "trtexec.txt").read_text()
    return sorted(set(re.findall(r"--(?:min|opt|max)Shapes=\S+", commands)))


def build_record(run) -> dict:
    return next(stage for stage in run.manifest["stages"] if stage["name"] == "build")


def test_a_dynamic_batch_model_with_sample_data_runs_to_the_end_in_one_command(workdir):
    run = run_trtpipe(workdir, "model.path=m.onnx", "data.path=samples.npz", cache=workdir / "cache", run_name="one")
    output = run.stdout + run.stderr
    assert run.code == 0, output
    assert run.statuses() == {"sanitize": "ran", "upgrade_opset": "ran", "precision": "ran", "build": "deferred",
                              "validate": "ran"}
    build_line = next(line for line in output.splitlines() if line.strip().startswith("build ") and "deferred" in line)
    assert DERIVED in build_line and DERIVED in build_record(run)["summary"]
    assert shapes_in(run) == ["--maxShapes=x:2x3x8x8", "--minShapes=x:2x3x8x8", "--optShapes=x:2x3x8x8"]
    # The widening override the line prints, pasted, reaches the end too (the same profile, written out).
    widen = quoted_overrides(build_line.split(DERIVED, 1)[1])
    assert widen == ["build.profiles=[{x:{min:[2,3,8,8],opt:[2,3,8,8],max:[2,3,8,8]}}]"]
    pasted = run_trtpipe(workdir, "model.path=m.onnx", "data.path=samples.npz", *widen, cache=workdir / "cache",
                         run_name="one_widened")
    assert pasted.code == 0, pasted.stdout + pasted.stderr
    assert shapes_in(pasted) == shapes_in(run) and "profile from the sample data" not in build_record(pasted)["summary"]


def test_the_derived_profile_is_part_of_the_build_key(workdir):
    """Other values of the same shapes reuse the build; another batch size builds for that size.

    `precision.default=fp32` makes the build's input model independent of the sample values
    (no range rule reads them), so the build key differs only by what the build itself takes."""
    cache = workdir / "cache_key"
    common = ("model.path=m.onnx", "precision.default=fp32")
    first = run_trtpipe(workdir, *common, "data.path=samples.npz", cache=cache, run_name="key_a")
    same_shapes = run_trtpipe(workdir, *common, "data.path=samples_b2_other.npz", cache=cache, run_name="key_b")
    other_batch = run_trtpipe(workdir, *common, "data.path=samples_b3.npz", cache=cache, run_name="key_c")
    assert first.code == same_shapes.code == other_batch.code == 0, other_batch.stdout + other_batch.stderr
    assert build_record(same_shapes)["key"] == build_record(first)["key"]
    assert build_record(same_shapes)["inputs"] == build_record(other_batch)["inputs"]  # only the shapes differ
    assert build_record(other_batch)["key"] != build_record(first)["key"]
    assert shapes_in(other_batch) == ["--maxShapes=x:3x3x8x8", "--minShapes=x:3x3x8x8", "--optShapes=x:3x3x8x8"]


def test_require_profiles_restores_the_error_and_its_fix_reaches_the_end(workdir):
    run, errors = run_pasting_fixes(workdir, "require", "model.path=m.onnx", "data.path=samples.npz",
                                    "build.require_profiles=true")
    assert len(errors) == 1 and "build.profiles is empty" in errors[0] and "build.require_profiles=true" in errors[0]
    # The example is the data's shape, so the pasted profile admits the data.
    assert "'build.profiles=[{x:{min:[2,3,8,8],opt:[2,3,8,8],max:[2,3,8,8]}}]'" in errors[0]
    assert run.code == 0 and run.statuses()["build"] == "deferred"


def test_sample_data_outside_a_given_profile_is_an_error_naming_input_dimension_and_range(workdir):
    cache = workdir / "cache_outside"
    profile = "build.profiles=[{x:{min:[1,3,8,8],opt:[1,3,8,8],max:[1,3,8,8]}}]"
    run = run_trtpipe(workdir, "model.path=m.onnx", "data.path=samples.npz", profile, cache=cache, run_name="outside")
    output = run.stdout + run.stderr
    assert run.code == 2, output
    error = next(line for line in output.splitlines() if "Fix:" in line)
    assert "'x'" in error and "dimension 0 is 2" in error and "range [1, 1]" in error
    assert "Traceback" not in output and cache_entries(cache) == []  # refused before any stage ran
    fixed, errors = run_pasting_fixes(workdir, "outside_fixed", "model.path=m.onnx", "data.path=samples.npz", profile)
    assert len(errors) == 1 and fixed.code == 0
    assert shapes_in(fixed) == ["--maxShapes=x:2x3x8x8", "--minShapes=x:1x3x8x8", "--optShapes=x:1x3x8x8"]


def test_generated_data_outside_a_given_profile_is_refused_too(workdir):
    run = run_trtpipe(workdir, "model.path=m.onnx", "++data.inputs.x.shape=[4,3,8,8]",
                      "build.profiles=[{x:{min:[1,3,8,8],opt:[2,3,8,8],max:[3,3,8,8]}}]", cache=workdir / "cache",
                      run_name="generated_outside")
    assert run.code == 2 and "dimension 0 is 4, outside build.profiles[0].x's range [1, 3]" in run.stdout + run.stderr


def test_the_data_shape_fix_of_a_dynamic_model_reaches_the_end_in_one_paste(workdir):
    """Today's dead end: the dynamic-dim message offered a data shape, and taking it led to a second exit 2."""
    run, errors = run_pasting_fixes(workdir, "shape_only", "model.path=m.onnx")
    assert len(errors) == 1 and "has dynamic dimensions" in errors[0]
    assert run.statuses()["build"] == "deferred" and run.statuses()["validate"] == "ran"
    assert shapes_in(run) == ["--maxShapes=x:1x3x8x8", "--minShapes=x:1x3x8x8", "--optShapes=x:1x3x8x8"]


def test_an_integer_dynamic_input_needs_no_fix(workdir):
    """Its range is read from the model and, as token ids, its dims are batch 1 and
    `data.sequence_length` (128) positions (trtpipe/sample_dims.py): it once needed a Fix, whose
    shape was [1, 1]."""
    onnx.save(token_model(), str(workdir / "tokens.onnx"))
    run, errors = run_pasting_fixes(workdir, "tokens_one", "model.path=tokens.onnx")
    assert errors == [] and run.code == 0, run.stdout + run.stderr
    assert run.statuses()["build"] == "deferred" and "--minShapes=ids:1x128" in (
        run.run_dir / "build" / "trtexec.txt").read_text()


def test_the_deferred_build_script_carries_the_derived_profile(workdir):
    run = run_trtpipe(workdir, "model.path=m.onnx", "data.path=samples_b3.npz", cache=workdir / "cache",
                      run_name="script")
    assert run.code == 0, run.stdout + run.stderr
    script = (run.run_dir / "build" / "build_on_gpu.py").read_text()
    config = re.search(r"BUILD_CONFIG = json.loads\((.*)\)\n", script).group(1)
    import ast
    import json

    built = json.loads(ast.literal_eval(config))
    assert built["profiles"] == [{"x": {"min": [3, 3, 8, 8], "opt": [3, 3, 8, 8], "max": [3, 3, 8, 8]}}]
    assert "data_shapes" not in built
