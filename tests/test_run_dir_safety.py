"""A failed run never loses an earlier run's files in its run directory (issue 13, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

import trtpipe.api as api
from tests.cli_helpers import run_trtpipe

SMALL = ["model.builtin=mixed_precision", "stages=[sanitize]"]


def test_a_user_error_on_a_rerun_keeps_the_earlier_runs_log_and_hydra_dir(tmp_path):
    """Reproduced: `trtpipe model.path=/no/such.onnx hydra.run.dir=<existing run>` deleted the
    earlier run's trtpipe.log and .hydra/ (remove_run_leftovers removed them unconditionally)."""
    first = run_trtpipe(tmp_path, *SMALL)
    assert first.code == 0, first.stderr
    log_before = (first.run_dir / "trtpipe.log").read_text()
    hydra_before = sorted(p.name for p in (first.run_dir / ".hydra").iterdir())
    assert log_before and hydra_before

    again = run_trtpipe(tmp_path, "model.path=/no/such.onnx")  # same run directory
    assert again.code == 2, again.stderr
    assert (first.run_dir / "trtpipe.log").read_text().startswith(log_before)
    assert sorted(p.name for p in (first.run_dir / ".hydra").iterdir()) == hydra_before
    assert (first.run_dir / "manifest.json").is_file()


def test_a_user_error_into_a_new_run_dir_still_leaves_nothing(tmp_path):
    failed = run_trtpipe(tmp_path, "model.path=/no/such.onnx", run_name="fresh")
    assert failed.code == 2
    assert not failed.run_dir.exists()


def test_api_keeps_the_users_own_hydra_dir_on_a_user_error(tmp_path):
    """Reproduced: api.run(..., run_dir=d) with the user's own d/.hydra/ deleted it on a user error."""
    run_dir = tmp_path / "mine"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "notes.yaml").write_text("keep: me\n")
    (run_dir / "trtpipe.log").write_text("my earlier log\n")
    with pytest.raises(api.UserError):
        api.run(["model.path=/no/such.onnx", f"cache.dir={tmp_path / 'cache'}"], run_dir=run_dir, start_dir=tmp_path)
    assert (run_dir / ".hydra" / "notes.yaml").read_text() == "keep: me\n"
    assert (run_dir / "trtpipe.log").read_text().startswith("my earlier log\n")


def test_api_removes_what_it_created_on_a_user_error(tmp_path):
    run_dir = tmp_path / "new" / "run"
    with pytest.raises(api.UserError):
        api.run(["model.path=/no/such.onnx", f"cache.dir={tmp_path / 'cache'}"], run_dir=run_dir, start_dir=tmp_path)
    assert not run_dir.exists()
