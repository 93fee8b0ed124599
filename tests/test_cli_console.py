"""The console as users meet it (issue 14, items 8, 9, 10, 14), through the real `trtpipe` command:
no ONNX Runtime log line (coloured, unprefixed) on stderr, a failed validation told once,
table rows with distinct names cut in the middle, and `--quiet` printing the run directory."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe

LONG = "/model/encoder/layer.{}/attention/output/dense/Add_output_0"  # two names alike at both ends


def _save(path, nodes, inputs, outputs, initializers) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path.name


def unsqueeze_of_a_constant(path) -> str:
    """Folding `Unsqueeze(constant)` makes ONNX Runtime warn `UnsqueezeElimination cannot remove node`."""
    return _save(path, [helper.make_node("Unsqueeze", ["c", "axes"], ["u"], name="unsq"),
                        helper.make_node("Add", ["x", "u"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                 [numpy_helper.from_array(np.arange(3, dtype=np.float32), "c"),
                  numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")])


def embedding(path) -> str:
    """Gather from an 8-row table at ids + 1: an id of 7 or more makes ONNX Runtime log an error line.
    The offset keeps the check before any stage (sample ids against the table a Gather reads them
    from, numerics/input_ranges.py) out of the way: it does not follow arithmetic, so ONNX Runtime
    is the one that finds the bad index here."""
    return _save(path, [helper.make_node("Add", ["ids", "one"], ["shifted"], name="/embed/Add"),
                        helper.make_node("Gather", ["table", "shifted"], ["y"], name="/embed/Gather")],
                 [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2])],
                 [numpy_helper.from_array(np.ones((8, 2), dtype=np.float32), "table"),
                  numpy_helper.from_array(np.array(1, dtype=np.int64), "one")])


def overflow_with_long_names(path) -> str:
    """(1000 x)^2 overflows FP16 on one output; the other output is fine; both names are long."""
    return _save(path, [helper.make_node("Mul", ["x", "k"], ["big"], name="/scale/Mul"),
                        helper.make_node("Pow", ["big", "two"], [LONG.format(0)], name="/square/Pow"),
                        helper.make_node("Add", ["x", "x"], [LONG.format(1)], name="/double/Add")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                 [helper.make_tensor_value_info(LONG.format(i), TensorProto.FLOAT, [2, 8]) for i in range(2)],
                 [numpy_helper.from_array(np.array(1000.0, dtype=np.float32), "k"),
                  numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")])


def _no_onnxruntime_lines(stderr: str) -> None:
    assert "\x1b" not in stderr, stderr  # no ANSI escape (colour) at all
    assert ":onnxruntime:" not in stderr, stderr  # ONNX Runtime's own prefix `[W:onnxruntime:, file.cc:24 ...]`
    for line in stderr.splitlines():
        assert line.startswith(("trtpipe", "  ")), f"unprefixed line on stderr: {line!r}"


def test_quiet_success_prints_only_the_run_directory_and_no_onnxruntime_warning(tmp_path):
    model = unsqueeze_of_a_constant(tmp_path / "unsq.onnx")
    run = run_trtpipe(tmp_path, "+recipe=fp32", f"model.path={model}", "--quiet")
    assert run.code == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == [str(run.run_dir)]  # one line, the directory scripts look for
    assert (run.run_dir / "manifest.json").is_file()
    assert run.stderr == ""  # the fold's ONNX Runtime warning is not printed
    loud = run_trtpipe(tmp_path, "+recipe=fp32", f"model.path={model}", run_name="loud")
    assert loud.code == 0 and str(loud.run_dir) in loud.stdout.splitlines()[0]
    _no_onnxruntime_lines(loud.stderr)


def test_an_onnxruntime_error_is_told_once_in_trtpipes_words(tmp_path):
    model = embedding(tmp_path / "embed.onnx")
    np.savez(tmp_path / "ids.npz", ids=np.array([[1, 2, 3, 100]], dtype=np.int64))
    run = run_trtpipe(tmp_path, "+recipe=fp32", f"model.path={model}", "data.path=ids.npz")
    assert run.code == 2, run.stdout + run.stderr
    _no_onnxruntime_lines(run.stderr)
    assert run.stderr.count("indices element out of data bounds") == 1, run.stderr
    assert "Fix:" in run.stderr


@pytest.fixture(scope="module")
def failed_validation(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("failed-validation")
    model = overflow_with_long_names(workdir / "long.onnx")
    run = run_trtpipe(workdir, "+recipe=naive_fp16", f"model.path={model}")
    assert run.code == 1, run.stdout + run.stderr
    return workdir, model, run


def test_a_failed_validation_is_printed_once(failed_validation):
    _, _, run = failed_validation
    both = run.stdout + run.stderr
    # The table has the numbers and the bound, once; the stderr line names what failed, once.
    assert both.count("candidate values are inf/NaN where the reference is finite") == 1, both
    assert both.count("first node with non-finite values:") == 1, both
    reason = next(s for s in run.manifest["stages"] if s["name"] == "validate")["error"]
    assert reason.startswith("validation failed: emulated out of tolerance on " + LONG.format(0))
    assert LONG.format(1) not in reason  # the passing output is not named as failing
    assert both.count("validation failed:") == 1 and "validation failed:" in run.stderr
    assert run.stderr.count("\n") == 1, run.stderr  # one stderr line
    _no_onnxruntime_lines(run.stderr)


def test_quiet_failed_validation_still_names_what_failed(failed_validation):
    workdir, model, _ = failed_validation
    run = run_trtpipe(workdir, "+recipe=naive_fp16", f"model.path={model}", "--quiet", run_name="quiet")
    assert run.code == 1 and run.stdout == ""
    assert "validation failed: emulated out of tolerance on " + LONG.format(0) in run.stderr


def test_table_rows_never_show_two_names_alike(failed_validation):
    _, _, run = failed_validation
    rows = [line for line in run.stdout.splitlines() if line.startswith("    emulated ")]
    assert len(rows) == 2
    shown = [row[len("    emulated   "):].split()[0] for row in rows]
    assert shown[0] != shown[1], shown
    for text, name in zip(shown, [LONG.format(0), LONG.format(1)]):
        start, end = text.split("…")
        assert len(text) <= 28 and name.startswith(start) and name.endswith(end), text


def test_quiet_sweep_prints_one_run_directory_per_job(tmp_path):
    model = unsqueeze_of_a_constant(tmp_path / "unsq.onnx")
    sweep = tmp_path / "sweep"
    run = run_trtpipe(tmp_path, "-m", "+recipe=fp32", f"model.path={model}", "data.seed=0,1",
                      f"hydra.sweep.dir={sweep}", "--quiet")
    assert run.code == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == [str(sweep / "0"), str(sweep / "1")]  # no Hydra launcher line, no table
    assert (sweep / "summary.md").is_file() and run.stderr == ""


def test_quiet_works_with_hydra_logging_none(tmp_path):
    """`--quiet` raises Hydra's root log level; without hydra_logging's root key it must not fail."""
    model = unsqueeze_of_a_constant(tmp_path / "unsq.onnx")
    for name, extra in (("run", ()), ("sweep", ("-m", "data.seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"))):
        run = run_trtpipe(tmp_path, *extra, "+recipe=fp32", "stages=[sanitize]", f"model.path={model}",
                          "hydra/hydra_logging=none", "--quiet", run_name=name)
        assert run.code == 0, run.stdout + run.stderr
        expected = [str(run.run_dir)] if name == "run" else [str(tmp_path / "sweep" / "0"), str(tmp_path / "sweep" / "1")]
        assert run.stdout.splitlines() == expected
