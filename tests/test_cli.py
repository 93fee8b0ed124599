"""The `trtpipe` command end to end: real Hydra, real ONNX models, real files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.cli_helpers import cache_entries, run_trtpipe

STAGES = ["sanitize", "upgrade_opset", "precision", "build", "validate"]


@pytest.fixture(scope="module")
def first_and_second_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cli")
    first = run_trtpipe(workdir, "+recipe=transformer_fp16", run_name="first")
    second = run_trtpipe(workdir, "+recipe=transformer_fp16", run_name="second")
    return workdir, first, second


def test_recipe_runs_on_builtin_model_and_writes_manifest(first_and_second_run):
    _, first, _ = first_and_second_run
    assert first.code == 0, first.stderr + first.stdout
    manifest = first.manifest
    assert manifest["status"] == "ok"
    assert [s["name"] for s in manifest["stages"]] == STAGES
    # No TensorRT on this machine: the build is deferred, everything else runs.
    assert first.statuses() == {name: "deferred" if name == "build" else "ran" for name in STAGES}
    for stage in manifest["stages"]:
        assert len(stage["key"]) == 64 and stage["seconds"] >= 0
        assert "model" in stage["inputs"] or stage["name"] == "build"
        for output in stage["outputs"].values():
            assert (first.run_dir / output["path"]).is_file() and len(output["sha256"]) == 64
    kinds = {kind for stage in manifest["stages"] for kind in stage["outputs"]}
    assert {"model", "plan", "report"} <= kinds
    assert manifest["source"]["builtin"] == "transformer"
    assert manifest["tools"]["onnx"] == onnx.__version__
    assert manifest["config"]["model"]["builtin"] == "transformer"
    assert "+recipe=transformer_fp16" in manifest["overrides"]


def test_second_run_is_all_cached_with_same_digests(first_and_second_run):
    _, first, second = first_and_second_run
    assert second.code == 0, second.stderr
    assert second.statuses() == {name: "deferred" if name == "build" else "cached" for name in STAGES}
    for a, b in zip(first.manifest["stages"], second.manifest["stages"]):
        assert a["key"] == b["key"]
        assert a["outputs"] == b["outputs"]


def test_the_fused_layernorms_reach_the_run_directory(first_and_second_run):
    _, first, _ = first_and_second_run
    path = first.run_dir / first.manifest["stages"][1]["outputs"]["model"]["path"]
    model = onnx.load(str(path))
    ops = [node.op_type for node in model.graph.node]
    assert "LayerNormalization" in ops
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17


def test_changed_config_reruns_only_that_stage_and_says_why(first_and_second_run):
    workdir, _, _ = first_and_second_run
    third = run_trtpipe(workdir, "+recipe=transformer_fp16", "upgrade_opset.fuse_layernorm=false", run_name="third")
    assert third.code == 0, third.stderr
    assert third.statuses() == {"sanitize": "cached", "upgrade_opset": "ran", "precision": "ran", "build": "deferred",
                                "validate": "ran"}
    assert "config.fuse_layernorm changed true -> false" in third.stdout


def test_two_fresh_caches_give_byte_identical_artifacts(tmp_path, first_and_second_run):
    _, first, _ = first_and_second_run
    other = run_trtpipe(tmp_path, "+recipe=transformer_fp16")
    assert other.code == 0, other.stderr
    assert [s["outputs"] for s in other.manifest["stages"]] == [s["outputs"] for s in first.manifest["stages"]]
    assert [s["key"] for s in other.manifest["stages"]] == [s["key"] for s in first.manifest["stages"]]


def write_corrupt_model(path: Path) -> Path:
    path.write_bytes(b"\x08\x07\x12\x05trtpi\x3a\xff\xff\xff")  # a truncated protobuf
    return path


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["+recipe=does_not_exist"], "there is no recipe 'does_not_exist'"),
        (["model.path=/no/such.onnx"], "/no/such.onnx"),
        (["model.path=corrupt.onnx"], "corrupt.onnx"),
        (["+recipe=transformer_fp16", "sanitize.no_such_key=1"], "sanitize.no_such_key"),
        (["+recipe=transformer_fp16", "+sanitize.no_such_key=1"], "sanitize.no_such_key"),
        (["model.builtin=resnet"], "resnet"),
    ],
)
def test_user_errors_exit_2_in_one_line_and_leave_nothing(tmp_path, overrides, expected):
    write_corrupt_model(tmp_path / "corrupt.onnx")
    result = run_trtpipe(tmp_path, *overrides)
    assert result.code == 2, result.stdout + result.stderr
    output = (result.stdout + result.stderr).strip()
    error_lines = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(error_lines) == 1 and expected in error_lines[0], output
    assert "Traceback" not in output
    assert cache_entries(tmp_path / "cache") == []
    assert not result.run_dir.exists()


def test_failed_stage_skips_the_rest_and_exits_non_zero(tmp_path):
    # Parses as ONNX, but a node reads a tensor nothing produces: sanitize must fail.
    node = helper.make_node("Relu", ["nowhere"], ["y"], name="/broken/Relu")
    graph = helper.make_graph(
        [node], "broken", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "broken.onnx"))
    result = run_trtpipe(tmp_path, "model.path=broken.onnx")
    assert result.code in (1, 2), result.stdout + result.stderr
    assert result.statuses() == {"sanitize": "failed", "upgrade_opset": "skipped", "precision": "skipped",
                                 "build": "skipped", "validate": "skipped"}
    assert result.manifest["status"] == "failed"
    assert result.manifest["stages"][0]["error"]
    assert "Traceback" not in result.stdout + result.stderr
    assert [p for p in cache_entries(tmp_path / "cache") if p.parent.name == "sanitize"] == []


def test_cfg_job_prints_the_composed_config(tmp_path):
    result = run_trtpipe(tmp_path, "--cfg", "job", "+recipe=nafnet_fp16")
    assert result.code == 0, result.stderr
    assert "builtin: nafnet" in result.stdout
    assert not (tmp_path / "runs").exists()


def test_info_and_shell_completion_still_work(tmp_path):
    info = run_trtpipe(tmp_path, "--info", "defaults")
    assert info.code == 0 and "upgrade_opset/default" in info.stdout, info.stderr
    completion = run_trtpipe(tmp_path, "--shell-completion", "install=bash")
    assert completion.code == 0 and "complete" in completion.stdout, completion.stderr


def test_multirun_sweep_runs_each_job_and_shares_the_cache(tmp_path):
    result = run_trtpipe(tmp_path, "-m", "+recipe=transformer_fp16", "upgrade_opset.fuse_layernorm=true,false",
                         "hydra.sweep.dir=sweep")
    assert result.code == 0, result.stdout + result.stderr
    manifests = sorted((tmp_path / "sweep").glob("*/manifest.json"))
    assert len(manifests) == 2
    import json

    statuses = [json.loads(p.read_text())["stages"][0]["status"] for p in manifests]
    assert sorted(statuses) == ["cached", "ran"]  # sanitize computed once for both jobs


def test_console_script_is_installed():
    script = shutil.which("trtpipe", path=str(Path(sys.executable).parent))
    assert script, "the `trtpipe` console script is not installed next to this Python"
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "trtpipe" in done.stdout
