"""Mistakes in build.profiles are reported as build.profiles mistakes (issue 32, item 12), through
the real command line. Before: profile 0's opt shapes size the sample inputs, so an unknown input
name or 33 for a dimension fixed at 32 came out as a data.inputs mistake with a data.inputs Fix."""

from __future__ import annotations

import pytest

from tests.cli_helpers import run_trtpipe

SHAPE = "[1,8,32]"  # the built-in mixed_precision model's input x


@pytest.mark.parametrize("profile, expected", [
    (f"{{nope:{{min:{SHAPE},opt:{SHAPE},max:{SHAPE}}}}}",
     "build.profiles[0] names ['nope'], which are not inputs of the model (its inputs: ['x'])"),
    (f"{{x:{{min:{SHAPE},opt:[1,8,33],max:[1,8,33]}}}}",
     "build.profiles[0].x.opt[2] is 33, but that dimension is fixed at 32"),
])
@pytest.mark.parametrize("stages", ["[sanitize,upgrade_opset,precision,build,validate]", "[sanitize,precision]"])
def test_a_profile_mistake_names_build_profiles(tmp_path, profile, expected, stages):
    run = run_trtpipe(tmp_path, "model.builtin=mixed_precision", f"stages={stages}", f"build.profiles=[{profile}]",
                      timeout=180)
    assert run.code == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error" in line or "Fix:" in line]
    assert len(errors) == 1 and expected in errors[0], run.stderr
    assert "data.inputs" not in run.stderr, run.stderr
