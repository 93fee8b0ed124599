"""A run directory's files are the user's, not the cache's (issue 22, items 6 and 8).

Before: the run directory's files were writable hard links to the cache entry, so editing
run1/precision/precision_plan.json in place changed run2's copy (and the cache entry) and
broke run2's manifest; and files derived from a 0600 weights file landed 0644 in the cache
and the run directory."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

from tests.cli_helpers import run_trtpipe
from tests.external_model import DATA_OVERRIDE, weight_bytes, write_model

STAGES = "stages=[sanitize,upgrade_opset,precision]"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_editing_one_run_directory_changes_no_other_and_not_the_cache(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    runs = [run_trtpipe(tmp_path, STAGES, f"model.path={model}", DATA_OVERRIDE, run_name=name)
            for name in ("run1", "run2")]
    assert [run.code for run in runs] == [0, 0], runs[-1].stderr
    assert runs[1].statuses()["precision"] == "cached"
    plan1, plan2 = (run.run_dir / "precision" / "precision_plan.json" for run in runs)
    original = plan2.read_bytes()
    assert plan1.stat().st_nlink == 1 and plan2.stat().st_nlink == 1, "copies, not hard links"

    with open(plan1, "r+b") as handle:  # an in-place edit, as `sed -i`-less editors and scripts do
        handle.write(b"{}" + b" " * (len(original) - 2))

    assert plan2.read_bytes() == original
    [record] = [s for s in runs[1].manifest["stages"] if s["name"] == "precision"]
    assert record["outputs"]["plan"]["sha256"] == sha256(plan2), "run2's manifest still describes run2's files"
    # And the cache entry was not touched: a third run is a verified hit with the original plan.
    run3 = run_trtpipe(tmp_path, STAGES, f"model.path={model}", DATA_OVERRIDE, run_name="run3")
    assert run3.code == 0 and run3.statuses()["precision"] == "cached", run3.stdout + run3.stderr
    assert "invalid" not in run3.stdout + run3.stderr
    assert (run3.run_dir / "precision" / "precision_plan.json").read_bytes() == original
    assert json.loads(original)["nodes"]


def test_files_derived_from_a_private_weights_file_stay_private(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    (tmp_path / "model" / "w.bin").chmod(0o600)  # the weights are confidential; the graph is not
    run = run_trtpipe(tmp_path, STAGES, f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 0, run.stderr
    written = [p for stage in ("sanitize", "upgrade_opset", "precision") for p in (run.run_dir / stage).iterdir()]
    written += [p for p in (tmp_path / "cache" / "entries").rglob("*") if p.is_file() and p.name != "entry.json"]
    assert written
    readable = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in written if p.stat().st_mode & 0o077}
    assert readable == {}, "readable by group or others although made from a 0600 file"


def test_files_of_a_shared_model_keep_the_usual_permissions(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE)
    assert run.code == 0, run.stderr
    assert stat.S_IMODE((run.run_dir / "sanitize" / "model.onnx").stat().st_mode) & 0o044 == 0o044
