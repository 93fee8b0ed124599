"""Bad input caught early with the right fix (issue 13, item 11), each through the real command line.

Each test's docstring says what it reproduced before the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.test_bad_inputs import assert_clean_failure

NO_BUILD = "stages=[sanitize,upgrade_opset,precision,validate]"


def value(name: str, shape=(1, 4), dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def duplicate_names_model(path: Path) -> None:
    """Three main-graph nodes and both nodes of an If's then-branch are all named 'dup'."""
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["t1"], name="dup"), helper.make_node("Neg", ["t1"], ["t2"], name="dup")],
        "then", [], [value("t2")])
    else_branch = helper.make_graph([helper.make_node("Sigmoid", ["b"], ["e1"], name="dup")], "else", [], [value("e1")])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="dup"),
        helper.make_node("Sigmoid", ["a"], ["b"], name="dup"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["branch"], name="choose", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Add", ["a", "branch"], ["y"], name="dup"),
    ]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph(nodes, "g", [value("x")], [value("y")], [zero])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_duplicate_node_names_are_made_unique_in_sanitize(tmp_path):
    """Reproduced: a model whose nodes share a name (main graph and an If's branch) ran through
    sanitize, upgrade and precision, then validate failed with "ONNX Runtime 1.32.0 cannot load the
    model: two nodes with same node name (dup). Fix: use an onnxruntime that supports it"."""
    duplicate_names_model(tmp_path / "dup.onnx")
    run = run_trtpipe(tmp_path, "model.path=dup.onnx", NO_BUILD)
    assert run.code == 0, run.stdout + run.stderr
    assert run.statuses() == {"sanitize": "ran", "upgrade_opset": "ran", "precision": "ran", "validate": "ran"}
    sanitize = next(s for s in run.manifest["stages"] if s["name"] == "sanitize")
    assert "3 duplicate node name(s) made unique (dup -> dup_1, dup -> dup_2, dup -> dup_1)" in sanitize["summary"]
    assert "were renamed" in (run.run_dir / "trtpipe.log").read_text()
    sanitized = onnx.load(str(run.run_dir / "sanitize" / "model.onnx"))
    main = [n.name for n in sanitized.graph.node]
    assert len(set(main)) == len(main) and {"dup", "dup_1", "dup_2"} <= set(main)
    choose = next(n for n in sanitized.graph.node if n.op_type == "If")
    branch = next(a.g for a in choose.attribute if a.name == "then_branch")
    assert sorted(n.name for n in branch.node) == ["dup", "dup_1"]
    # The renamed model computes what the source says: relu(x) + (-relu(sigmoid(relu(x)))) for sum(x) > 0.
    x = np.linspace(0.1, 2.0, 4, dtype=np.float32).reshape(1, 4)
    got = ort.InferenceSession(str(run.run_dir / "sanitize" / "model.onnx")).run(None, {"x": x})[0]
    a = np.maximum(x, 0)
    np.testing.assert_allclose(got, a - 1 / (1 + np.exp(-a)), rtol=1e-6)
    validation = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    assert validation["passed"], validation


@pytest.mark.parametrize("stages, expected", [
    ("[sanitize,precision,upgrade_opset]",
     "'stages' lists 'upgrade_opset' after 'precision'"),
    ("[sanitize,upgrade_opset,precision,validate,promote_outputs]",
     "'stages' lists 'promote_outputs' after 'validate'"),
    ("[precision,sanitize]", "'stages' lists 'sanitize' after 'precision'"),
    ("[sanitize,build,precision]", "'stages' lists 'precision' after 'build'"),
    ("[sanitize,precision,promote_outputs,upgrade_opset,validate]",
     "'stages' lists 'upgrade_opset' after 'promote_outputs'"),
])
def test_stages_in_an_impossible_order_are_refused_before_any_stage(tmp_path, stages, expected):
    """Reproduced: `stages=[sanitize,precision,upgrade_opset]` ran to "trtpipe: ok" (an upgrade and
    LayerNorm fusion of a graph already cast to FP16, which the plan no longer names), and
    `[...,validate,promote_outputs]` changed the model after validation judged it; only a stage
    whose input no earlier stage produced was refused."""
    run = run_trtpipe(tmp_path, f"stages={stages}")
    assert_clean_failure(run, tmp_path, 2, expected)
    assert not run.run_dir.exists() or not (run.run_dir / "sanitize").exists()
    working = ",".join(sorted(stages.strip("[]").split(","), key=["sanitize", "upgrade_opset", "precision",
                                                                  "promote_outputs", "build", "validate"].index))
    assert f"Fix: 'stages=[{working}]'" in run.stderr


@pytest.mark.parametrize("stages, expected", [
    ("[sanitize,sanitize]", "lists a stage twice"),
    ("[sanitize,santize]", "'santize', which is not a trtpipe stage"),
])
def test_stage_lists_refused_already(tmp_path, stages, expected):
    """Checked, not changed: duplicates and unknown names were already refused (build before
    precision was refused as `stage 'build' needs ['plan']`; it now names the order that works)."""
    assert_clean_failure(run_trtpipe(tmp_path, f"stages={stages}"), tmp_path, 2, expected)


@pytest.mark.parametrize("override, expected", [
    ("validate.tolerance.cosine_min=1.5", "validate.tolerance.cosine_min is 1.5: a cosine similarity lies in [-1, 1]"),
    ("validate.tolerance.cosine_min=-1.01", "validate.tolerance.cosine_min is -1.01"),
    ("validate.tolerance.max_abs=-0.1", "validate.tolerance.max_abs is -0.1: an error bound is a finite number >= 0"),
    ("validate.tolerance.max_rel=-1", "validate.tolerance.max_rel is -1.0"),
    ("validate.tolerance.rel_l2=-0.01", "validate.tolerance.rel_l2 is -0.01"),
    ("validate.tolerance.abs_p99=-2", "validate.tolerance.abs_p99 is -2.0"),
    ("validate.tolerance.rel_p99=inf", "validate.tolerance.rel_p99 is inf"),
    ("validate.tolerance.psnr_min=nan", "validate.tolerance.psnr_min is nan: NaN compares false"),
    ("validate.tolerance.psnr_min=inf", "validate.tolerance.psnr_min is inf: a PSNR bound is a finite number"),
    ("+validate.outputs.y={rel_l2:-0.1}", "validate.outputs.y.rel_l2 is -0.1"),
    ("+validate.outputs.y={cosine_min:2}", "validate.outputs.y.cosine_min is 2"),
    ("+validate.outputs.y={max_rell:0.1}", "validate.outputs.y.max_rell is not a tolerance key"),
    ("+validate.outputs.y=3", "validate.outputs.y is 3, not a tolerance"),
    ("++precision.search.tolerance={cosine_min:2}", "precision.search.tolerance.cosine_min is 2"),
    ("validate.tolerance.pixels_off_8bit=1.5", "validate.tolerance.pixels_off_8bit is 1.5: a share of elements lies in [0, 1]"),
    ("validate.tolerance.pixels_off_8bit=-0.01", "validate.tolerance.pixels_off_8bit is -0.01"),
    ("+validate.outputs.y={argmax_agree_min:99.9}", "validate.outputs.y.argmax_agree_min is 99.9: a share"),
])
def test_tolerances_out_of_range_are_refused_at_compose_time(tmp_path, override, expected):
    """Reproduced: `validate.tolerance.cosine_min=1.5` (no cosine exceeds 1: every output fails),
    negative error bounds (nothing passes) and NaN bounds (NaN compares false: everything passes)
    all ran the whole pipeline; a per-output entry of the wrong kind failed only in validate."""
    run = run_trtpipe(tmp_path, "stages=[sanitize,validate]", override)
    assert_clean_failure(run, tmp_path, 2, expected)
    assert not (run.run_dir / "sanitize").exists()


def test_tolerances_at_the_ends_of_their_ranges_are_accepted(tmp_path):
    """The limits themselves are valid bounds (cosine -1 judges nothing, 0 demands equality)."""
    run = run_trtpipe(tmp_path, "stages=[sanitize]", "validate.tolerance.cosine_min=-1",
                      "validate.tolerance.max_abs=0", "+validate.outputs.y={cosine_min:1,psnr_min:-10}")
    assert run.code == 0, run.stderr


def test_a_swept_tolerance_out_of_range_is_refused_before_the_first_job(tmp_path):
    """The sweep pre-flight composes every value: the bad one is refused before any job runs."""
    run = run_trtpipe(tmp_path, "-m", "stages=[sanitize]", "validate.tolerance.cosine_min=0.9,1.5",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert run.code == 2 and "validate.tolerance.cosine_min is 1.5" in run.stderr, run.stderr
    assert not (tmp_path / "sweep").exists()


def relu_model(path: Path, opset: int) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act")], "g", [value("x")], [value("y")])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)]), str(path))


def test_upgrade_target_below_the_model_opset_is_reported(tmp_path):
    """Reproduced: an opset-18 model with `upgrade_opset.target=17` (then the default; since issue 33
    the default follows the model, tests/test_cli_first_day2.py) printed "opset 18 -> 18" and
    nothing else: the target was silently ignored."""
    relu_model(tmp_path / "op18.onnx", 18)
    run = run_trtpipe(tmp_path, "model.path=op18.onnx", "stages=[sanitize,upgrade_opset]", "upgrade_opset.target=17")
    assert run.code == 0, run.stderr
    stage = next(s for s in run.manifest["stages"] if s["name"] == "upgrade_opset")
    assert "target 17 is below the model's opset 18: left at 18, never downgraded" in stage["summary"]
    assert "set upgrade_opset.target=18" in run.stdout + run.stderr
    assert onnx.load(str(run.run_dir / "upgrade_opset" / "model.onnx")).opset_import[0].version == 18
    # At or above the model's opset: no such message.
    quiet = run_trtpipe(tmp_path, "model.path=op18.onnx", "stages=[sanitize,upgrade_opset]",
                        "upgrade_opset.target=18", run_name="quiet")
    assert quiet.code == 0 and "below the model's opset" not in quiet.stdout + quiet.stderr


def long_named_model(path: Path) -> None:
    """Node names of 40 'a's and one '!': `(a+)+$` tries ~2^40 ways to split them before failing."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="a" * 40 + "!"),
             helper.make_node("Sigmoid", ["h"], ["y"], name="a" * 39 + "!")]
    graph = helper.make_graph(nodes, "g", [value("x")], [value("y")])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("override, expected", [
    ("+precision.rules.slow={match:regex,pattern:'(a+)+$',precision:fp32}", "precision rule 'slow': regex '(a+)+$'"),
    ("promote_outputs.nodes=['(a+)+$']", "promote_outputs.nodes pattern '(a+)+$'"),
])
def test_a_pathological_regex_is_stopped_with_the_rule_named(tmp_path, override, expected):
    """Reproduced: the rule `(a+)+$` against 40-character node names hung the precision stage
    (Python's `re` has no timeout; killed by the test's 300 s limit, with no message)."""
    import time

    long_named_model(tmp_path / "long.onnx")
    extra = ["promote_outputs.match=regex"] if "promote" in override else []
    started = time.monotonic()
    run = run_trtpipe(tmp_path, "model.path=long.onnx", "stages=[sanitize,precision,promote_outputs]",
                      override, *extra, timeout=120)
    assert time.monotonic() - started < 60
    assert_clean_failure(run, tmp_path, 2, expected)
    assert "did not finish matching" in run.stderr and "Fix: rewrite the pattern" in run.stderr


def test_a_regex_rule_that_finishes_still_matches(tmp_path):
    """The bounded matching gives the same nodes as `re.fullmatch` (the worker's answer is used)."""
    long_named_model(tmp_path / "long.onnx")
    run = run_trtpipe(tmp_path, "model.path=long.onnx", "stages=[sanitize,precision]",
                      "+precision.rules.first={match:regex,pattern:'a{40}!',precision:fp32}")
    assert run.code == 0, run.stderr
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    plan = json.loads((run.run_dir / stage["outputs"]["plan"]["path"]).read_text())
    assert plan["rules"]["first"] == ["a" * 40 + "!"]


def divide_by_zero_model(path: Path) -> None:
    """y = relu(x / 0): +inf wherever x > 0, NaN where x == 0, in the reference and any candidate."""
    zero = numpy_helper.from_array(np.zeros((1, 4), np.float32), "z")
    nodes = [helper.make_node("Div", ["x", "z"], ["q"], name="div"), helper.make_node("Relu", ["q"], ["y"], name="act")]
    graph = helper.make_graph(nodes, "g", [value("x")], [value("y")], [zero])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_non_finite_reference_is_reported_not_silently_passed(tmp_path):
    """Reproduced: an output that is +inf in the reference and in the candidate passed with a row
    of zeros ("max_abs 0 ... nonfin 0 ok") and nothing in validation.json saying that no value
    of the output was judged at all. Since issue 22 item 5 such an output fails (nothing of it
    was compared, below validate.min_compared); with the bound set to 0 on purpose it passes with
    the note."""
    divide_by_zero_model(tmp_path / "div0.onnx")
    run = run_trtpipe(tmp_path, "model.path=div0.onnx", NO_BUILD, "+data.inputs.x={low:0.5,high:1}")
    assert run.code == 1, run.stdout + run.stderr
    report = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    assert not report["passed"]
    assert any("only 0 of 4 positions compared" in r for r in report["candidates"][0]["reasons"]), report
    run = run_trtpipe(tmp_path, "model.path=div0.onnx", NO_BUILD, "+data.inputs.x={low:0.5,high:1}",
                      "validate.min_compared=0", run_name="bound-off")
    assert run.code == 0, run.stdout + run.stderr
    report = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    metrics = report["candidates"][0]["outputs"]["y"]
    assert (metrics["ref_nonfinite"], metrics["ref_nonfinite_mismatch"], metrics["nonfinite"]) == (4, 0, 0)
    assert report["passed"]
    note = "candidate emulated, output y: the reference is inf/NaN at 4 position(s), left out of the metrics"
    assert any(n.startswith(note) for n in report["notes"]) and note in run.stdout + run.stderr
    assert "ref_nf" in (run.run_dir / "validate" / "validation.txt").read_text()
