"""Issue 14 item 7: a stage's cache key holds only what changes its outputs, through the
real command line (trtpipe and trtpipe-verify)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe
from trtpipe.cache.cache import cache_key
from trtpipe.cache.explain import changed_paths, explain_miss

TO_PRECISION = "stages=[sanitize,upgrade_opset,precision]"
# The repair judges plans by the tolerances, so with it on they are in precision's key (the last
# test); the key-scope tests of the search's settings run with it off.
NO_REPAIR = "precision.repair=false"
SEARCH = ("precision.search.enabled=true", "precision.search.max_trials=2")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("key_scope")
    first = run_trtpipe(workdir, TO_PRECISION, NO_REPAIR, run_name="first")
    assert first.code == 0, first.stderr
    return workdir, first


def _precision(run) -> dict:
    return next(s for s in run.manifest["stages"] if s["name"] == "precision")


def test_the_search_tolerance_is_not_in_the_key_while_the_search_is_off(work):
    workdir, first = work
    changed = run_trtpipe(workdir, TO_PRECISION, NO_REPAIR, "validate.tolerance.cosine_min=0.99",
                          "+validate.outputs.pooler_output.max_abs=0.5", run_name="tolerance")
    assert changed.code == 0, changed.stderr
    assert changed.statuses()["precision"] == "cached"
    assert _precision(changed)["key"] == _precision(first)["key"]
    assert "tolerance" not in json.dumps(_precision(changed)["material"]["config"]["search"])
    # The stage itself still received (and the manifest records) the whole config.
    assert changed.manifest["config"]["precision"]["search"]["tolerance"]["cosine_min"] == 0.99


def test_with_the_search_on_the_tolerance_reruns_precision_and_is_named(work):
    workdir, _ = work
    searched = run_trtpipe(workdir, TO_PRECISION, NO_REPAIR, *SEARCH, run_name="search")
    assert searched.code == 0, searched.stderr
    assert searched.statuses()["precision"] == "ran"
    assert "config.search.enabled changed false -> true" in searched.stdout  # the switch first, not its settings
    tighter = run_trtpipe(workdir, TO_PRECISION, NO_REPAIR, *SEARCH, "validate.tolerance.cosine_min=0.99",
                          run_name="search2")
    assert tighter.code == 0, tighter.stderr
    assert tighter.statuses()["precision"] == "ran"
    line = next(line for line in tighter.stdout.splitlines() if "precision" in line and " ran " in line)
    assert line.endswith("(config.search.tolerance.cosine_min changed 0.999 -> 0.99)"), line


def test_reasons_do_not_report_a_filled_empty_mapping_as_a_change(work):
    workdir, _ = work
    run = run_trtpipe(workdir, "stages=[sanitize,upgrade_opset,precision,validate]", NO_REPAIR, run_name="v1")
    assert run.code == 0, run.stderr
    more = run_trtpipe(workdir, "stages=[sanitize,upgrade_opset,precision,validate]", NO_REPAIR,
                       "+validate.outputs.pooler_output.max_abs=0.5", run_name="v2")
    assert more.code == 0, more.stderr
    assert more.statuses() == {"sanitize": "cached", "upgrade_opset": "cached", "precision": "cached", "validate": "ran"}
    assert "-> null" not in more.stdout and "{}" not in more.stdout
    assert "config.outputs.pooler_output.max_abs changed null -> 0.5" in more.stdout


def test_explain_names_at_most_two_changes_inputs_first():
    old = {"inputs": {"model": "a" * 64}, "config": {"x": 1, "y": 2, "z": {}}, "tools": {"onnx": "1"}}
    new = {"inputs": {"model": "b" * 64}, "config": {"x": 5, "y": 6, "z": {"k": 1}}, "tools": {"onnx": "2"}}
    reason = explain_miss([old], new)
    assert reason.startswith("inputs.model changed"), reason
    assert "; config.x changed 1 -> 5 (+3 more)" in reason
    # {} -> filled is said once, by its entry; {} dropped without entries stays a change.
    assert [c[0] for c in changed_paths({"z": {}}, {"z": {"k": 1}})] == ["z.k"]
    assert changed_paths({"a": 1, "z": {}}, {"a": 1}) == [("z", {}, None)]


def _verify(manifest: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from trtpipe.verify import main; main()", str(manifest), "--json"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def _as_older_version_wrote_it(manifest: dict, honest_key: bool) -> dict:
    """Precision's material as versions before the key scope recorded it: the whole search block."""
    stage = next(s for s in manifest["stages"] if s["name"] == "precision")
    stage["material"]["config"]["search"] = json.loads(json.dumps(manifest["config"]["precision"]["search"]))
    assert "tolerance" in stage["material"]["config"]["search"]
    if honest_key:
        stage["key"] = cache_key(stage["material"])
    return manifest


@pytest.mark.parametrize("honest_key", [True, False])
def test_verify_accepts_a_manifest_written_with_the_older_key_shape(work, tmp_path, honest_key):
    workdir, first = work
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(_as_older_version_wrote_it(first.manifest, honest_key)))
    done = _verify(path, workdir)
    stages = {s["name"]: s for s in json.loads(done.stdout)["stages"]}
    if honest_key:
        assert done.returncode == 0, done.stdout + done.stderr
        assert stages["precision"]["verdict"] == "identical"
        assert "does not read" in stages["precision"]["reason"]
    else:  # material changed, key kept: an edited manifest is still found out
        assert done.returncode == 1, done.stdout + done.stderr
        assert stages["precision"]["verdict"] == "drifted"
        assert "edited" in stages["precision"]["reason"]


def test_a_rerun_after_the_key_narrowed_says_so_not_a_setting_change():
    searched = {"enabled": False, "max_trials": 30, "tolerance": {"cosine_min": 0.999}, "outputs": {}}
    config = {"default": "fp16", "list_only": False, "auto": {"max_abs": 4096.0}, "data": {"seed": 0, "iterations": 2},
              "repair": {"enabled": False}}
    old = {"stage": "precision", "version": "13", "config": {**config, "search": searched}}
    new = {"stage": "precision", "version": "13", "config": {**config, "search": {"enabled": False}}}
    assert explain_miss([old], new) == (
        "the key no longer holds settings this stage does not read (entries of an earlier trtpipe)")
    tighter = {**new, "config": {**config, "auto": {"max_abs": 1024.0}, "search": {"enabled": False}}}
    assert explain_miss([old], tighter) == "config.auto.max_abs changed 4096.0 -> 1024.0"


def test_with_the_repair_on_a_tighter_bound_reruns_precision_and_is_named(tmp_path):
    """The repair (on by default) checks the plan against the bounds: a tighter one may need another
    plan, so it reruns precision; the repair's own budget is in the key too, the search's is not."""
    first = run_trtpipe(tmp_path, TO_PRECISION, run_name="first")
    assert first.code == 0, first.stderr
    material = _precision(first)["material"]["config"]
    assert material["repair"] == {"enabled": True, "max_trials": 40, "max_seconds": 600.0}
    assert material["search"]["tolerance"]["cosine_min"] == 0.999 and "max_trials" not in material["search"]
    tighter = run_trtpipe(tmp_path, TO_PRECISION, "validate.tolerance.cosine_min=0.99", run_name="tighter")
    assert tighter.code == 0, tighter.stderr
    line = next(line for line in tighter.stdout.splitlines() if line.strip().startswith("precision ") and " ran " in line)
    assert line.endswith("(config.search.tolerance.cosine_min changed 0.999 -> 0.99)"), line
    same = run_trtpipe(tmp_path, TO_PRECISION, "precision.search.max_trials=7", run_name="search_budget")
    assert same.statuses()["precision"] == "cached"


def test_a_rerun_names_the_setting_that_changed_not_settings_that_entered_the_key(tmp_path):
    """`precision.auto.max_abs=null` leaves data.* out of precision's key; setting it again brings them
    back: the reason is max_abs, not `config.data.iterations changed null -> 2`."""
    off = run_trtpipe(tmp_path, TO_PRECISION, "precision.auto.max_abs=null", run_name="off")
    assert off.code == 0, off.stderr
    on = run_trtpipe(tmp_path, TO_PRECISION, "precision.auto.max_abs=1000", run_name="on")
    assert on.code == 0, on.stderr
    line = next(line for line in on.stdout.splitlines() if line.strip().startswith("precision ") and " ran " in line)
    assert "config.auto.max_abs changed null -> 1000.0" in line, line
    assert "config.data" not in line, line
