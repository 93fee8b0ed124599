"""Issue 24 item 5 through the real command line: sanitize never inflates a model.

`trtpipe model.path=... stages=[sanitize]` on a 360 KB model whose constants
expand to 53 MB (tests/graph/test_no_inflation.py builds it): the written model
stays within the stated bound, the stage line names what was left unfolded and
what it would have written, `sanitize.fold_growth_limit=null` folds everything.
"""

from __future__ import annotations

import onnx

from tests.cli_helpers import run_trtpipe
from tests.graph.test_no_inflation import FLOOR, LIMIT, _expanding_model


def _stage_line(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.strip().startswith("sanitize ")][-1]


def test_the_sanitize_line_names_what_was_left_unfolded_and_the_model_stays_small(tmp_path):
    source = tmp_path / "expanding.onnx"
    onnx.save(_expanding_model(), str(source))
    run = run_trtpipe(tmp_path, f"model.path={source}", "stages=[sanitize]")
    assert run.code == 0, run.stderr
    line = _stage_line(run.stdout)
    assert "5 left unfolded by the growth rule (" in line and "fill ConstantOfShape 24.0 MiB" in line, line
    written = [path for path in run.run_dir.rglob("*.onnx")]
    assert written, list(run.run_dir.rglob("*"))
    folded = int(line.split(" folded")[0].rsplit(" ", 1)[-1])
    for path in written:
        assert path.stat().st_size <= LIMIT * (source.stat().st_size + FLOOR * folded)


def test_no_limit_is_a_setting(tmp_path):
    source = tmp_path / "expanding.onnx"
    onnx.save(_expanding_model(), str(source))
    run = run_trtpipe(tmp_path, f"model.path={source}", "stages=[sanitize]", "sanitize.fold_growth_limit=null")
    assert run.code == 0, run.stderr
    assert "left unfolded" not in _stage_line(run.stdout)
    assert max(path.stat().st_size for path in run.run_dir.rglob("*.onnx")) > 50 << 20


def test_a_limit_below_one_is_a_user_error(tmp_path):
    source = tmp_path / "expanding.onnx"
    onnx.save(_expanding_model(), str(source))
    run = run_trtpipe(tmp_path, f"model.path={source}", "stages=[sanitize]", "sanitize.fold_growth_limit=0.5")
    assert run.code == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr and "fold_growth_limit" in run.stderr
