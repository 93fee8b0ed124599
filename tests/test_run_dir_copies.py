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


def test_another_users_private_entry_is_refused_not_trusted_or_deleted(tmp_path, monkeypatch):
    """Item 8 makes entries of a 0600 model 0600: another user sharing the cache cannot read them.
    Root reads everything, so a test double answers EACCES, what the kernel answers that user;
    before, the PermissionError ended the run as an internal error."""
    import errno
    import os

    import pytest

    from trtpipe.cache import cache as cache_module
    from trtpipe.cache.cache import ArtifactCache
    from trtpipe.errors import UserError

    material = {"stage": "sanitize", "version": "1", "config": {}, "inputs": {"model": "0" * 64}, "tools": {}}

    def compute(out_dir):
        (out_dir / "model.bin").write_bytes(b"private weights")
        return {"outputs": {"model": "model.bin"}}

    cache = ArtifactCache(tmp_path / "cache")
    entry = cache.get_or_compute("sanitize", material, compute).entry
    real_sha256_file = cache_module.sha256_file

    def denied(path):
        if Path(path).name == "model.bin":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_sha256_file(path)

    monkeypatch.setattr(cache_module, "sha256_file", denied)
    with pytest.raises(UserError) as raised:
        ArtifactCache(tmp_path / "cache").get_or_compute("sanitize", material, compute)
    assert "not readable for you" in str(raised.value)
    assert (entry.directory / "model.bin").read_bytes() == b"private weights"
