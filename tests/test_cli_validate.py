"""Validation from the command line: the naive recipe is rejected with the culprit named,
the protective recipes pass, and validation.json follows the contract."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import run_trtpipe


def report_of(run) -> dict:
    stage = next(s for s in run.manifest["stages"] if s["name"] == "validate")
    return json.loads((run.run_dir / stage["outputs"]["report"]["path"]).read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("validate")


@pytest.mark.parametrize("model, culprit", [
    ("transformer", "/embeddings/LayerNorm/Pow"),
    ("nafnet", "/encoders.0/encoders.0.0/norm1/Pow"),
])
def test_naive_fp16_is_rejected_and_the_first_bad_node_named(workdir, model, culprit):
    run = run_trtpipe(workdir, "+recipe=naive_fp16", f"model.builtin={model}", run_name=f"naive-{model}")
    assert run.code == 1, run.stdout + run.stderr
    assert run.statuses()["validate"] == "failed"
    report = report_of(run)
    assert report["passed"] is False and report["candidates"][0]["passed"] is False
    first = report["localization"]["first"]
    assert first["node"] == culprit and first["op_type"] == "Pow"
    assert first["cand_nonfinite"] > 0  # FP16 overflow: inf where the reference is finite
    assert first["kind"] == "nonfinite" and report["localization"]["first_nonfinite"] == first
    assert culprit in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("recipe", ["transformer_fp16", "nafnet_fp16", "mixed_precision", "fp32"])
def test_protective_recipes_pass_validation(workdir, recipe):
    run = run_trtpipe(workdir, f"+recipe={recipe}", run_name=recipe)
    assert run.code == 0, run.stdout + run.stderr
    report = report_of(run)
    assert report["passed"] is True
    candidate = report["candidates"][0]
    assert candidate["name"] == "emulated" and candidate["passed"]
    for metrics in candidate["outputs"].values():
        assert {"max_abs", "mean_abs", "max_rel", "abs_p99", "rel_p99", "rel_l2", "cosine", "psnr",
                "nonfinite", "pixels_off_8bit", "argmax_agree"} <= set(metrics)
        assert metrics["nonfinite"] == 0
    if recipe == "nafnet_fp16":
        # Well inside the 8-bit criterion, and the restoration benchmark's 56.3 dB too.
        restored = candidate["outputs"]["restored"]
        assert restored["psnr"] >= 56.3 and restored["pixels_off_8bit"] == 0.0


def test_failed_validation_is_cached_and_still_fails(workdir):
    again = run_trtpipe(workdir, "+recipe=naive_fp16", "model.builtin=nafnet", run_name="naive-again")
    assert again.code == 1
    assert again.statuses()["validate"] == "failed"
    assert again.manifest["stages"][-1]["key"]  # the verdict came from the cache entry


def test_promoted_intermediates_are_validated_too(workdir):
    run = run_trtpipe(workdir, "+recipe=transformer_fp16", "stages=[sanitize,upgrade_opset,precision,promote_outputs,validate]",
                      "promote_outputs.match=regex", "promote_outputs.nodes=['.*/attention/self/Softmax']",
                      run_name="promoted")
    assert run.code == 0, run.stdout + run.stderr
    outputs = report_of(run)["candidates"][0]["outputs"]
    promoted = [name for name in outputs if "Softmax" in name]
    assert len(promoted) == 2  # one per layer, compared with the reference's tensors
    assert {"last_hidden_state", "pooler_output"} <= set(outputs)  # originals kept


def test_search_recipe_finds_a_smaller_passing_fp32_set(workdir):
    import yaml

    run = run_trtpipe(workdir, "+recipe=transformer_fp16_search", run_name="search")
    assert run.code == 0, run.stdout + run.stderr
    stage = next(s for s in run.manifest["stages"] if s["name"] == "precision")
    search = json.loads((run.run_dir / stage["outputs"]["search_log"]["path"]).read_text())
    automatic = len(search["automatic_fp32_nodes"]) + len(search["fixed_fp32_nodes"])
    assert search["passed"] and search["fp32_count"] <= automatic
    assert search["trials"] and all({"fp32_count", "passed", "worst", "low_precision_flop_share", "errors"} <= set(t)
                                    for t in search["trials"])
    assert len(search["trials"]) <= 30 and search["pareto_front"]
    chosen = search["trials"][search["chosen"]["trial"] - 1]
    assert chosen["passed"] and search["low_precision_flop_share"] == chosen["low_precision_flop_share"]
    assert search["low_precision_flop_share"] >= search["trials"][0]["low_precision_flop_share"]  # the automatic plan
    rules = yaml.safe_load((run.run_dir / stage["outputs"]["search_rules"]["path"]).read_text())
    assert rules["precision"]["rules"]
    assert report_of(run)["passed"]  # validation re-run on the searched plan


def test_validation_draws_the_accuracy_picture(workdir):
    run = run_trtpipe(workdir, "+recipe=nafnet_fp16", "validate.plot_passed=true", run_name="nafnet-plot")
    stage = next(s for s in run.manifest["stages"] if s["name"] == "validate")
    png = run.run_dir / stage["outputs"]["plot"]["path"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_picture_is_drawn_when_validation_fails_and_only_then_by_default(workdir):
    """Decision (schema: plot_passed): the picture is read when a validation fails; drawing it on
    every passing run cost a localisation of every node and matplotlib (about half the stage)."""
    failed = run_trtpipe(workdir, "+recipe=naive_fp16", "model.builtin=nafnet", run_name="naive-plot")
    assert failed.code == 1, failed.stderr
    stage = next(s for s in failed.manifest["stages"] if s["name"] == "validate")
    assert (failed.run_dir / stage["outputs"]["plot"]["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    passed = run_trtpipe(workdir, "+recipe=nafnet_fp16", run_name="nafnet-no-plot")
    assert passed.code == 0, passed.stderr
    stage = next(s for s in passed.manifest["stages"] if s["name"] == "validate")
    assert "plot" not in stage["outputs"]


def _expand_model(path, rows: int) -> None:
    """x [1,16] -> MatMul -> Expand to [rows, 16] -> ReduceSum: one big intermediate, no big weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([rows, 16], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Expand", ["h", "shape"], ["e"], name="big"),
         helper.make_node("ReduceSum", ["e"], ["y"], name="sum", keepdims=0)], "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_onnx_runtime_out_of_memory_in_validate_is_one_line_exit_2(tmp_path):
    """Issue 22 item 11. Reproduced: the FP32 reference fits, the emulated FP16 candidate (its
    rounding Casts hold a second copy of the 1 GiB tensor) does not: exit 1 with
    `Fail: [ONNXRuntimeError] : 1 : FAIL : ... bfc_arena.cc:360 void* onnxruntime::BFCArena::...`
    (or `RuntimeException ... std::bad_alloc (traceback in ...)`), where the same failure in the
    precision stage's reference run was already a clean exit 2. The repair is off: its check of the
    plan would emulate the candidate in the precision stage first (also a clean exit 2 there)."""
    import resource

    _expand_model(tmp_path / "expand.onnx", 1 << 24)  # a 1 GiB float32 intermediate

    def address_space_of_2_5_gib():
        resource.setrlimit(resource.RLIMIT_AS, (int(2.5 * (1 << 30)),) * 2)

    run = run_trtpipe(tmp_path, "model.path=expand.onnx", "stages=[sanitize,precision,validate]",
                      "sanitize.fold_constants=false", "precision.auto.max_abs=null", "validate.plot=false",
                      "data.iterations=1", "precision.repair=false", preexec_fn=address_space_of_2_5_gib)
    assert run.code == 2, run.stdout + run.stderr
    assert run.statuses()["validate"] == "failed"
    error = run.manifest["stages"][-1]["error"]
    assert "ran out of memory to run the model" in error, error
    assert "Failed to allocate memory" in error or "bad_alloc" in error, error
    assert "onnxruntime_src" not in error and "[ONNXRuntimeError]" not in error and "data.iterations=1" in error
    problems = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(problems) == 1 and "traceback" not in run.stderr.lower(), run.stderr
