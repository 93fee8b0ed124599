"""`trtpipe reduce RUN_DIR` through the real command line, on issue 33's case: the failing run of
`+recipe=naive_fp16` on the NAFNet-style built-in model becomes a model of at most 10 nodes that
fails the same way. The reduced files are checked on their own, as a bug report's reader would:
the model passes onnx.checker, and trtpipe's FP16 emulation of it on inputs.npz breaks the run's
bounds against reference.npz with finite values, as the run's output did.

Before this command, `trtpipe reduce RUN_DIR` was a Hydra override error ("missing EQUAL")."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest

from tests.cli_helpers import run_command, run_trtpipe
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.metrics import output_metrics
from trtpipe.validate.compare import Tolerance, judge


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("reduce")
    run = run_trtpipe(workdir, "+recipe=naive_fp16", "model.builtin=nafnet",
                      "stages=[sanitize,upgrade_opset,precision,validate]")
    assert run.code == 1, run.stderr  # validation rejects naive FP16 on NAFNet (the recipe's contract)
    return workdir, run


def _digests(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reduced(failed_run):
    workdir, run = failed_run
    before = _digests(run.run_dir)
    done = run_command(workdir, "reduce", str(run.run_dir), "-o", "reduced")
    assert done.returncode == 0, done.stderr
    assert _digests(run.run_dir) == before  # the run directory is evidence: untouched
    return workdir / "reduced", done, run


def test_naive_fp16_nafnet_reduces_to_at_most_ten_nodes(reduced):
    folder, done, _run = reduced
    assert sorted(p.name for p in folder.iterdir()) == ["inputs.npz", "model.onnx", "reduce.json", "reference.npz"]
    model = onnx.load(str(folder / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert 1 <= len(model.graph.node) <= 10, [n.op_type for n in model.graph.node]
    record = json.loads((folder / "reduce.json").read_text())
    assert record["output_of_run"] == "restored" and len(record["nodes"]) == len(model.graph.node)
    assert f"{len(model.graph.node)} of {record['candidate_nodes']} nodes" in done.stdout


def test_the_reduced_model_fails_the_same_way_on_its_own(reduced):
    folder, _done, run = reduced
    record = json.loads((folder / "reduce.json").read_text())
    tolerance = Tolerance(**{k: v for k, v in run.manifest["config"]["validate"]["tolerance"].items()})
    model = onnx.load(str(folder / "model.onnx"))
    inputs = dict(np.load(folder / "inputs.npz"))
    reference = dict(np.load(folder / "reference.npz"))
    output = model.graph.output[0].name
    produced = EmulatedRunner(model).run(inputs)[output]
    metrics = output_metrics(reference[output], produced)
    passed, reasons = judge(metrics, tolerance)
    assert not passed and metrics.nonfinite == 0, reasons  # a finite error, as the run's output had
    broken = {reason.split()[0] for reason in reasons}  # "rel_l2 0.97 exceeds rel_l2 0.014" -> rel_l2
    assert record["bound"] == "rel_l2" and "rel_l2" in broken, reasons
    assert set(record["bounds_broken"]) == set(record["bounds_broken_by_run"])
    # The same window in FP32 (the reference's numbers) passes: the failure is the plan's precision.
    assert all(value.dtype == np.float16 for value in inputs.values())


def test_bad_run_directories_are_one_line_exit_2(failed_run, tmp_path):
    _workdir, run = failed_run
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    for args, problem in ((("reduce", str(tmp_path)), "is not a trtpipe run directory"),
                          (("reduce", str(run.run_dir), "-o", str(tmp_path / "taken")), "is not an empty folder")):
        done = run_command(tmp_path, *args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and problem in lines[0], done.stderr
        assert "Fix:" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "reduced").exists()


def test_a_run_that_passed_has_nothing_to_reduce(tmp_path):
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act")], "g",
                              [value("x", TensorProto.FLOAT, [1, 4])], [value("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "m.onnx"))
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "stages=[sanitize,upgrade_opset,precision,validate]")
    assert run.code == 0, run.stderr
    done = run_command(tmp_path, "reduce", str(run.run_dir))
    assert done.returncode == 2 and "did not fail validation" in done.stderr, done.stderr
    assert not (tmp_path / "reduced").exists()
