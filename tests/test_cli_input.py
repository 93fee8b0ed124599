"""Nothing the user types is silently ignored, and every suggested override works when
pasted: issue 14 items 1-5, through the real `trtpipe` command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.cli_helpers import run_trtpipe

FAST = ("stages=[sanitize,upgrade_opset,precision,validate]", "validate.plot=false")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli_input")


def fix_words(output: str, marker: str = "Fix:") -> list[str]:
    """The quoted overrides of the Fix on the line holding `marker`, split as a shell splits them."""
    line = next(line for line in output.splitlines() if marker in line and "Fix:" in line)
    fix = line.split("Fix:", 1)[1].rstrip(".")
    return [word for word in shlex.split(fix) if "=" in word or word.startswith("~")]


def test_a_misspelled_output_name_is_an_error_listing_the_outputs_and_its_fix_applies_the_setting(workdir):
    # A bound no real candidate meets: once it reaches the right output, validation must fail on it.
    typo = "+validate.outputs.last_hidden={max_abs:1e-9}"
    run = run_trtpipe(workdir, *FAST, typo, cache=workdir / "cache", run_name="typo")
    assert run.code == 2, run.stdout + run.stderr
    line = next(line for line in run.stderr.splitlines() if "validate.outputs.last_hidden " in line)
    assert "closest first: last_hidden_state, pooler_output" in line
    pasted = fix_words(line)
    assert pasted == ["~validate.outputs.last_hidden", "++validate.outputs.last_hidden_state={max_abs:1e-09}"]
    fixed = run_trtpipe(workdir, *FAST, typo, *pasted, cache=workdir / "cache", run_name="typo_fixed")
    assert fixed.code == 1, fixed.stdout + fixed.stderr  # the bound now judges last_hidden_state
    report = json.loads((fixed.run_dir / "validate" / "validation.json").read_text())
    assert [reason.split(":")[0] for reason in report["candidates"][0]["reasons"]] == ["last_hidden_state"]
    assert "exceeds max_abs 1e-09" in report["candidates"][0]["reasons"][0]


def warnings_of(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("trtpipe: warning:")]


def test_settings_of_a_stage_not_in_stages_are_reported_once_with_a_fix_that_runs_it(workdir):
    run = run_trtpipe(workdir, "stages=[sanitize]", "promote_outputs.tensors=[nope]", "promote_outputs.match=regex",
                      "precision.auto.max_abs=100", "upgrade_opset=keep_layernorm", "promote_outputs.as_type=fp32",
                      cache=workdir / "cache", run_name="ignored")
    assert run.code == 0, run.stdout + run.stderr
    lines = warnings_of(run)
    assert len(lines) == 3, lines  # one line per stage; as_type=fp32 is its default: not reported
    assert "warning: upgrade_opset=keep_layernorm (command line) set but ignored: stage 'upgrade_opset'" in lines[0]
    promote = next(line for line in lines if "'promote_outputs'" in line)
    assert "promote_outputs.tensors (command line), promote_outputs.match (command line)" in promote
    assert fix_words(promote) == ["stages=[sanitize,promote_outputs]"]
    precision = next(line for line in lines if "'precision'" in line)
    assert fix_words(precision) == ["stages=[sanitize,precision]"]
    # Pasted, the stage runs and the setting acts: the regex `nope` matches no tensor (exit 2 naming it).
    pasted = run_trtpipe(workdir, "stages=[sanitize]", "promote_outputs.tensors=[nope]", "promote_outputs.match=regex",
                         *fix_words(promote), cache=workdir / "cache", run_name="ignored_fixed")
    assert pasted.code == 2 and "'nope'" in pasted.stderr and not warnings_of(pasted), pasted.stderr


def test_recipe_settings_are_reported_unless_stages_comes_from_the_command_line(workdir, tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "promotes.yaml").write_text("# @package _global_\npromote_outputs:\n  nodes: [a]\n")
    env = {"TRTPIPE_RECIPES": str(recipes)}
    run = run_trtpipe(tmp_path, "+recipe=promotes", "stages=[sanitize]", "validate.plot=false",
                      cache=workdir / "cache", env=env, run_name="recipe_cli_stages")
    assert run.code == 0, run.stderr
    # `stages` on the command line: the recipe's promote_outputs.nodes is the user's choice, validate.plot is not.
    assert len(warnings_of(run)) == 1 and "validate.plot (command line) set but ignored" in warnings_of(run)[0]
    # The shipped recipe's validate tolerances, with validate left out on the command line: no warning.
    shipped = run_trtpipe(tmp_path, "+recipe=transformer_fp16", "stages=[sanitize]", cache=workdir / "cache",
                          run_name="shipped")
    assert shipped.code == 0 and not warnings_of(shipped), shipped.stderr
    # `stages` from the recipe: its own promote_outputs setting is reported as the recipe's.
    (recipes / "promotes_staged.yaml").write_text(
        "# @package _global_\nstages: [sanitize]\npromote_outputs:\n  nodes: [a]\n")
    staged = run_trtpipe(tmp_path, "+recipe=promotes_staged", cache=workdir / "cache", env=env, run_name="staged")
    assert staged.code == 0, staged.stderr
    assert ["promote_outputs.nodes (recipe/config)" in line for line in warnings_of(staged)] == [True]


def test_an_interpolated_or_shared_setting_of_an_unlisted_stage_is_not_reported(workdir):
    run = run_trtpipe(workdir, "+recipe=transformer_fp16_search", "stages=[sanitize,upgrade_opset,precision]",
                      "validate.tolerance.rel_l2=0.1", "build.profiles=[]", "precision.list_only=true",
                      cache=workdir / "cache", run_name="interpolated")
    assert run.code == 0, run.stderr
    assert not warnings_of(run), run.stderr


def test_recipe_without_plus_names_the_override_that_works(workdir):
    run = run_trtpipe(workdir, "recipe=fp32", cache=workdir / "cache", run_name="no_plus")
    assert run.code == 2
    assert "Fix: replace 'recipe=fp32' with '+recipe=fp32'" in run.stderr
    assert not run.run_dir.exists()
    unknown = run_trtpipe(workdir, "recipe=fp3", cache=workdir / "cache", run_name="no_plus_unknown")
    assert unknown.code == 2 and "one of: fp32, mixed_precision" in unknown.stderr


def completion(line: str, shell: str = "bash") -> list[str]:
    environment = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line))}
    done = subprocess.run([sys.executable, "-m", "trtpipe", "-sc", f"query={shell}"], env=environment,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "fish"])
def test_shell_completion_offers_plus_recipe(shell):
    words = completion("trtpipe ", shell)
    assert "+recipe=" in words and "recipe=" not in words and "precision." in words
    assert "+recipe=fp32" in completion("trtpipe +recipe=", shell)
    assert all(word.startswith("+recipe=") for word in completion("trtpipe recipe=", shell))


def test_a_new_entry_without_plus_prints_the_exact_override_and_it_works_when_pasted(workdir):
    typed = "data.inputs.input_ids={low:0,high:2,dtype:int64}"
    run = run_trtpipe(workdir, "stages=[sanitize]", typed, cache=workdir / "cache", run_name="new_entry")
    assert run.code == 2
    assert f"Fix: replace '{typed}' with '++{typed}'" in run.stderr
    words = fix_words(run.stderr)
    assert words == [typed, "++" + typed]
    pasted = run_trtpipe(workdir, "stages=[sanitize]", words[1], cache=workdir / "cache", run_name="new_entry_fixed")
    assert pasted.code == 0, pasted.stderr


def test_one_search_bound_set_without_plus_gets_a_fix_that_sets_it(workdir):
    """`precision.search.tolerance.rel_l2=0.5` was silently lost (the key sits under the
    interpolation ${validate.tolerance}); Hydra's own hint, `+`, fails there: '++' works."""
    typed = "precision.search.tolerance.rel_l2=0.5"
    run = run_trtpipe(workdir, "--cfg", "job", typed, cache=workdir / "cache")
    assert run.code == 2 and f"with '++{typed}'" in run.stderr, run.stderr
    fixed = run_trtpipe(workdir, "--cfg", "job", "++" + typed, cache=workdir / "cache")
    assert yaml.safe_load(fixed.stdout)["precision"]["search"]["tolerance"] == {"rel_l2": 0.5}


@pytest.mark.parametrize("recipe", [None, "transformer_fp16_search", "nafnet_fp16"])
def test_cfg_job_resolve_prints_the_resolved_config(workdir, recipe):
    overrides = ["--cfg", "job", "--resolve"] + ([f"+recipe={recipe}"] if recipe else [])
    run = run_trtpipe(workdir, *overrides, cache=workdir / "cache")
    assert run.code == 0, run.stderr
    assert "${" not in run.stdout
    config = yaml.safe_load(run.stdout)
    assert config["precision"]["search"]["tolerance"] == config["validate"]["tolerance"]
    assert config["cache"]["dir"] == str(workdir / "cache")
