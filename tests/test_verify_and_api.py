"""MLOps: verify a run from its manifest, the Python API, and --json output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe

VERIFY = [sys.executable, "-c", "from trtpipe.verify import main; main()"]


def verify(manifest: Path, *extra: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*VERIFY, str(manifest), "--json", *extra], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("verify")
    run = run_trtpipe(workdir, "+recipe=transformer_fp16", run_name="recorded")
    assert run.code == 0, run.stderr
    return workdir, run


def edited_manifest(run, tmp_path: Path, edit) -> Path:
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    edit(manifest)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def test_a_clean_rebuild_verifies_identical(recorded):
    workdir, run = recorded
    done = verify(run.run_dir, cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["identical"] and {s["verdict"] for s in verdict["stages"]} == {"identical"}


def test_an_edited_config_value_is_named(recorded, tmp_path):
    workdir, run = recorded

    def edit(manifest):
        manifest["config"]["upgrade_opset"]["fuse_layernorm"] = False

    done = verify(edited_manifest(run, tmp_path, edit), cwd=workdir)
    assert done.returncode == 1
    stages = {s["name"]: s for s in json.loads(done.stdout)["stages"]}
    assert stages["sanitize"]["verdict"] == "identical"
    assert stages["upgrade_opset"]["verdict"] == "drifted"
    assert "config.fuse_layernorm: true -> false" in stages["upgrade_opset"]["reason"]


def test_a_faked_tool_version_is_named(recorded, tmp_path):
    workdir, run = recorded

    def edit(manifest):
        manifest["tools"]["onnx"] = "1.0.0"
        for stage in manifest["stages"]:
            stage["material"]["tools"]["onnx"] = "1.0.0"

    done = verify(edited_manifest(run, tmp_path, edit), cwd=workdir)
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert all('tools.onnx: "1.0.0"' in s["reason"] for s in verdict["stages"])
    assert verdict["environment"]["tools.onnx"][0] == "1.0.0"


def test_a_changed_model_file_is_named(tmp_path):
    import onnx

    from trtpipe.models import builtin_model

    model = tmp_path / "model.onnx"
    onnx.save(builtin_model("mixed_precision"), str(model))
    run = run_trtpipe(tmp_path, "+recipe=mixed_precision", f"model.path={model}", run_name="user-model")
    assert run.code == 0, run.stderr
    changed = builtin_model("mixed_precision")
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    onnx.save(changed, str(model))
    done = verify(run.run_dir, cwd=tmp_path)
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert "differs from the recorded one" in verdict["notes"][0]
    assert verdict["stages"][0]["reason"].startswith("inputs.model")


def test_a_bad_manifest_exits_2(tmp_path):
    (tmp_path / "manifest.json").write_text('{"not": "a manifest"}')
    done = verify(tmp_path, cwd=tmp_path)
    assert done.returncode == 2 and "not a trtpipe manifest" in done.stderr


@pytest.mark.parametrize("recipe", ["transformer_fp16", "nafnet_fp16", "mixed_precision", "fp32",
                                    "transformer_fp16_search"])
def test_api_runs_every_recipe_with_the_command_lines_digests(recipe, tmp_path):
    import trtpipe.api as api

    result = api.run([f"+recipe={recipe}", f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "api",
                     start_dir=tmp_path)
    assert result.ok and result.validation["passed"]
    cli = run_trtpipe(tmp_path, f"+recipe={recipe}", cache=tmp_path / "cache-cli")
    assert cli.code == 0
    assert [s["outputs"] for s in cli.manifest["stages"]] == [s["outputs"] for s in result.manifest["stages"]]


def test_api_raises_typed_errors(tmp_path):
    import trtpipe.api as api

    with pytest.raises(api.UserError, match="sanitize.no_such_key"):
        api.run(["+sanitize.no_such_key=1"], run_dir=tmp_path / "r", start_dir=tmp_path)
    with pytest.raises(api.PipelineFailed) as failed:
        api.run(["+recipe=naive_fp16", f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "r2", start_dir=tmp_path)
    assert failed.value.result.exit_code == 1 and failed.value.result.validation["passed"] is False
    cfg = api.compose(["+recipe=nafnet_fp16"])
    assert cfg.model.builtin == "nafnet"


def test_json_switch_puts_one_summary_last_on_stdout(tmp_path):
    run = run_trtpipe(tmp_path, "--json", "+recipe=naive_fp16")
    assert run.code == 1
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["run_dir"] == str(run.run_dir) and summary["exit_code"] == 1
    assert summary["validation"]["passed"] is False
    assert {s["name"]: s["status"] for s in summary["stages"]}["validate"] == "failed"
    assert "sanitize" in run.stderr  # progress went to stderr


def test_a_failed_run_verifies_identical_and_says_the_failure_was_reproduced(tmp_path):
    """Issue 24, item 7: verify printed `identical` next to the rebuild's own "validate failed"
    line on stderr, which read as a contradiction. Identical now says what it means: the same
    outputs and the same failure, on the stage's line and in the verdict."""
    run = run_trtpipe(tmp_path, "+recipe=naive_fp16", "stages=[sanitize,precision,validate]", run_name="failed")
    assert run.code == 1, run.stderr
    done = subprocess.run([*VERIFY, str(run.run_dir)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    validate_line = next(line for line in done.stdout.splitlines() if line.strip().startswith("validate"))
    assert "identical" in validate_line and "failed in the recorded run and in the rebuild alike" in validate_line
    assert "validation failed" in validate_line
    assert "including its failed validate" in done.stdout.splitlines()[-1]
    assert "failed" not in done.stderr, done.stderr  # no unattributed line of the rebuild's
    verdict = json.loads(subprocess.run([*VERIFY, str(run.run_dir), "--json"], cwd=tmp_path, capture_output=True,
                                        text=True, timeout=300).stdout)
    assert verdict["identical"] and verdict["failed_in_both"] == ["validate"]
