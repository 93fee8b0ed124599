"""Dynamic dimensions as exporters write them, through the real command line.

A small real graph (Conv -> Relu -> GlobalAveragePool -> Flatten -> MatMul) whose
batch dimension is written the four ways exporters write "any size": -1, 0,
dim_param 'batch', and a dim with neither field. Every Fix a message gives for
such an input is pasted, as a shell would split it, into the next run, which must
get past that error: two fixes that contradict each other are a bug.
"""

from __future__ import annotations

import re
import shlex

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe

FORMS = {"minus_one": -1, "zero": 0, "dim_param": "batch", "missing": None}
DOTTED = "input.1"  # torch.onnx's name for an unnamed input: needs Hydra's dict form in an override
NO_BUILD = "stages=[sanitize,upgrade_opset,precision,validate]"


def small_model(batch, input_name: str = "x") -> onnx.ModelProto:
    rng = np.random.RandomState(0)
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch if batch is not None else "b", 3, 8, 8])
    if batch is None:
        x.type.tensor_type.shape.dim[0].Clear()  # a dim with neither dim_value nor dim_param
    nodes = [
        helper.make_node("Conv", [input_name, "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    weights = [numpy_helper.from_array(rng.randn(*shape).astype(np.float32), name)
               for name, shape in (("w", (4, 3, 3, 3)), ("b", (4,)), ("fc", (4, 5)))]
    graph = helper.make_graph(nodes, "small", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dynamic")
    for form, batch in FORMS.items():
        onnx.save(small_model(batch), str(directory / f"{form}.onnx"))
    onnx.save(small_model("batch", DOTTED), str(directory / "dotted.onnx"))
    return directory


def pasted_fixes(output: str) -> tuple[str, list[str]]:
    """(the error line, the overrides its Fix quotes, split as a shell splits them)."""
    line = next(line for line in output.splitlines() if "Fix:" in line)
    fix = line.split("Fix:", 1)[1]
    quoted = re.findall(r"'[^']*'", fix)
    assert quoted, f"the Fix names no override to paste: {line}"
    return line, [word for text in quoted for word in shlex.split(text)]


def run_pasting_fixes(workdir, name: str, *overrides: str, max_fixes: int = 3):
    """Run, paste each Fix into the next run until it succeeds; returns (final run, error lines)."""
    overrides, errors = list(overrides), []
    for attempt in range(max_fixes + 1):
        run = run_trtpipe(workdir, *overrides, cache=workdir / "cache", run_name=f"{name}_{attempt}")
        if run.code == 0:
            return run, errors
        assert run.code == 2, run.stdout + run.stderr
        line, pasted = pasted_fixes(run.stdout + run.stderr)
        assert line not in errors, f"the same error came back after pasting its fix: {line}"
        errors.append(line)
        overrides += pasted
    raise AssertionError(f"still failing after pasting {max_fixes} fixes: {errors}")


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_dynamic_batch_runs_after_pasting_the_fix(workdir, form):
    run, errors = run_pasting_fixes(workdir, f"data_{form}", f"model.path={workdir / form}.onnx", NO_BUILD)
    assert len(errors) == 1 and "has dynamic dimensions" in errors[0] and "[1,3,8,8]" in errors[0]
    assert {run.statuses()["precision"], run.statuses()["validate"]} <= {"ran", "cached"}  # zero = -1 after sanitize


def test_with_build_each_fix_works_and_none_contradicts_another(workdir):
    """The sample shape the first Fix gives is the build's profile too: one fix reaches the end
    (issue 24, item 3; it took a second Fix, for build.profiles, before)."""
    run, errors = run_pasting_fixes(workdir, "build_all_fixes", f"model.path={workdir / 'minus_one'}.onnx")
    assert [("dynamic dimensions" in e, "build.profiles is empty" in e) for e in errors] == [(True, False)]
    assert run.statuses()["build"] == "deferred"
    commands = (run.run_dir / "build" / "trtexec.txt").read_text()
    assert "--minShapes=x:1x3x8x8" in commands


@pytest.mark.parametrize("form", ["minus_one", "dim_param"])
def test_a_float_input_with_a_profile_needs_no_data_inputs(workdir, form):
    profile = "build.profiles=[{x:{min:[1,3,8,8],opt:[2,3,8,8],max:[4,3,8,8]}}]"
    run = run_trtpipe(workdir, f"model.path={workdir / form}.onnx", profile, cache=workdir / "cache",
                      run_name=f"profile_{form}")
    assert run.code == 0, run.stdout + run.stderr
    assert run.statuses()["build"] == "deferred" and run.statuses()["validate"] == "ran"
    commands = (run.run_dir / "build" / "trtexec.txt").read_text()
    assert "--optShapes=x:2x3x8x8" in commands and "--maxShapes=x:4x3x8x8" in commands


def test_an_input_name_with_a_dot_gets_fixes_that_work_when_pasted(workdir):
    run, errors = run_pasting_fixes(workdir, "dotted", f"model.path={workdir / 'dotted'}.onnx")
    assert "'++data.inputs={input.1:{shape:[1,3,8,8]}}'" in errors[0] and len(errors) == 1
    assert "--minShapes=input.1:1x3x8x8" in (run.run_dir / "build" / "trtexec.txt").read_text()
    assert run.statuses()["build"] == "deferred" and run.statuses()["validate"] == "ran"


def token_model() -> onnx.ModelProto:
    """y = ReduceMean(Gather(embedding, ids)), ids: int64 [batch, seq] written as -1 and dim_param."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [-1, "seq"])
    table = numpy_helper.from_array(np.random.RandomState(1).randn(30, 6).astype(np.float32), "embedding")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["embedding", "ids"], ["e"], name="embed"),
             helper.make_node("ReduceMean", ["e", "axes"], ["y"], name="mean", keepdims=0)]
    graph = helper.make_graph(nodes, "tokens", [ids], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])],
                              [table, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def test_an_integer_dynamic_input_takes_its_range_and_a_sequence_shape_from_the_model(workdir):
    """Issue 30, item 5: the range is the embedding table's, the shape [1, data.sequence_length]
    (it took a Fix whose shape, [1, 1], was a one-token sequence)."""
    onnx.save(token_model(), str(workdir / "tokens.onnx"))
    run, errors = run_pasting_fixes(workdir, "tokens", f"model.path={workdir / 'tokens'}.onnx")
    assert errors == [] and "integers in [0, 30), read from the model" in run.stdout
    assert "input 'ids': shape [1, 128]" in run.stdout and run.statuses()["validate"] == "ran"
    assert "--optShapes=ids:1x128" in (run.run_dir / "build" / "trtexec.txt").read_text()
