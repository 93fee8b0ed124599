"""A recipe file that cannot be read in a TRTPIPE_RECIPES folder (issue 32, item 9), through the
real command line. Before: one unparsable YAML file made every run exit 2, also runs with a
shipped recipe or none; now only `+recipe=` of that file fails, other runs warn once naming it,
and `trtpipe --help` lists it as unreadable."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cli_helpers import run_trtpipe

BROKEN = "# @package _global_\nprecision: [unclosed\n  x: : :\n"


def user_recipes(tmp_path):
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "broken.yaml").write_text(BROKEN)
    (folder / "team.yaml").write_text("# @package _global_\n# Our team's settings.\nprecision:\n  default: fp32\n")
    return folder


def test_only_the_recipe_asked_for_may_fail(tmp_path):
    env = {"TRTPIPE_RECIPES": str(user_recipes(tmp_path))}
    for name, recipe in (("none", ()), ("shipped", ("+recipe=fp32",)), ("user", ("+recipe=team",))):
        run = run_trtpipe(tmp_path, "stages=[sanitize]", *recipe, env=env, run_name=name, timeout=120)
        assert run.code == 0, (name, run.stderr)
        warnings = [line for line in run.stderr.splitlines() if "broken.yaml" in line]
        assert len(warnings) == 1 and "warning" in warnings[0] and "skipped" in warnings[0], run.stderr
    asked = run_trtpipe(tmp_path, "stages=[sanitize]", "+recipe=broken", env=env, run_name="asked", timeout=120)
    lines = [line for line in asked.stderr.splitlines() if line.startswith("trtpipe: error")]
    assert asked.code == 2 and len(lines) == 1 and "Traceback" not in asked.stderr, asked.stderr
    assert "broken.yaml is not valid YAML" in lines[0] and "there is no recipe" not in lines[0], lines[0]


def test_a_broken_user_recipe_never_runs_the_shipped_one_of_its_name(tmp_path):
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "fp32.yaml").write_text(BROKEN)
    run = run_trtpipe(tmp_path, "stages=[sanitize]", "+recipe=fp32", env={"TRTPIPE_RECIPES": str(folder)},
                      timeout=120)
    assert run.code == 2 and "fp32.yaml is not valid YAML" in run.stderr, run.stderr


def test_help_lists_the_unreadable_recipe(tmp_path):
    env = {**os.environ, "TRTPIPE_RECIPES": str(user_recipes(tmp_path))}
    done = subprocess.run([sys.executable, "-m", "trtpipe", "--help"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("broken "))
    assert "UNREADABLE" in line and "skipped" in line, done.stdout
    assert any(line.strip().startswith("team ") and "Our team's settings" in line for line in done.stdout.splitlines())
