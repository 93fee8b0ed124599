"""A single run writes `summary.md` to paste into a review (issue 33, item 7; runner/run_summary.py):
the outcome, the overrides, every stage, the plan and the verdict with each bound checked."""

from __future__ import annotations

import pytest

from tests.cli_helpers import run_trtpipe

NO_BUILD = "stages=[sanitize,upgrade_opset,precision,validate]"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("run_summary")


def test_a_passing_run_s_summary_has_its_stages_plan_and_every_bound(workdir):
    run = run_trtpipe(workdir, "+recipe=transformer_fp16", NO_BUILD, run_name="passing")
    assert run.code == 0, run.stderr
    text = (run.run_dir / "summary.md").read_text()
    assert text.startswith("# trtpipe run: ok (exit 0)")
    assert "Model: `built-in transformer`" in text and "`+recipe=transformer_fp16`" in text
    for stage in ("sanitize", "upgrade_opset", "precision", "validate"):
        assert f"| {stage} | ran |" in text, text
    assert "% of the FLOPs in low precision" in text and "Verdict: passed" in text
    rows = [line for line in text.splitlines() if line.startswith("| emulated |")]
    assert len(rows) == 2 and all("(bound 0.014)" in row and "(bound 0.9999)" in row for row in rows), text


def test_a_failing_run_s_summary_says_where_it_stopped_and_the_bound_it_broke(workdir):
    run = run_trtpipe(workdir, "+recipe=naive_fp16", "precision.repair=false", "validate.tolerance.argmax_agree_min=0.5",
                      NO_BUILD, run_name="failing")
    assert run.code == 1, run.stderr
    text = (run.run_dir / "summary.md").read_text()
    assert text.startswith("# trtpipe run: failed (exit 1)")
    assert "Stopped: validate:" in text and "Verdict: FAILED" in text
    assert "| FAIL |" in text and "(bound 0.5)" in text  # a bound the user set is shown too
