"""No cache path is followed through a symbolic link (issue 22, item 2).

Before: a symlinked `entries/<stage>` made trtpipe publish its new entries outside the
cache, and a folder out there that happened to carry a key's name was "discarded"
(renamed into the cache's tmp/ and deleted) with a warning."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.cli_helpers import run_trtpipe
from tests.external_model import DATA_OVERRIDE, weight_bytes, write_model


def stage_key(tmp_path: Path, model: Path, cache: Path) -> str:
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache, run_name="first")
    assert run.code == 0, run.stderr
    return run.manifest["stages"][0]["key"]


def one_line(run) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


def test_a_symlinked_stage_folder_is_refused_and_nothing_outside_is_touched(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    key = stage_key(tmp_path, model, cache)
    # entries/sanitize -> a folder elsewhere, which holds a folder that carries the key's name.
    (cache / "entries" / "sanitize").rename(tmp_path / "moved")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / key).mkdir(parents=True)
    (elsewhere / key / "thesis.tex").write_text("years of work")
    os.symlink(elsewhere, cache / "entries" / "sanitize")

    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache)
    assert run.code == 2, run.stderr
    assert "entries/sanitize" in run.stdout + run.stderr and "symbolic link" in run.stdout + run.stderr
    assert (elsewhere / key / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in elsewhere.iterdir()) == [key], "no entry was published outside the cache"
    assert not any((cache / "tmp").iterdir())


def test_a_symlinked_stage_folder_without_an_entry_gets_nothing_written_through_it(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    stage_key(tmp_path, model, cache)  # a real cache, whose sanitize folder then moves away
    (cache / "entries" / "sanitize").rename(tmp_path / "moved")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, cache / "entries" / "sanitize")
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache)
    assert run.code == 2, run.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_lock_is_refused_in_one_line_and_its_target_untouched(tmp_path):
    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    key = stage_key(tmp_path, model, cache)
    # A new setting: another key, whose lock file is planted as a link to a user's file.
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, "sanitize.toposort=false",
                      cache=cache, run_name="probe")
    other = run.manifest["stages"][0]["key"]
    assert other != key
    shutil.rmtree(cache / "entries" / "sanitize" / other)
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    lock = cache / "locks" / f"{other}.lock"
    lock.unlink(missing_ok=True)
    os.symlink(victim, lock)
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, "sanitize.toposort=false",
                      cache=cache, run_name="linked")
    assert run.code == 2, run.stdout + run.stderr
    assert "symbolic link" in run.stdout + run.stderr and f"locks/{other}.lock" in run.stdout + run.stderr
    assert victim.read_text() == "keep me"


def test_a_symlinked_miss_index_is_never_written_through(tmp_path):
    """A guard (this held before too: the index is replaced by a rename, never written in place)."""
    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    stage_key(tmp_path, model, cache)
    victim = tmp_path / "notes.json"
    victim.write_text('["keep me"]')
    index = cache / "index" / "sanitize.json"
    index.unlink()
    os.symlink(victim, index)
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, "sanitize.toposort=false",
                      cache=cache, run_name="indexed")
    assert run.code == 0, run.stderr
    assert victim.read_text() == '["keep me"]'
    assert not index.is_symlink() and index.is_file()  # replaced by trtpipe's own file


def test_a_linked_entry_is_discarded_as_a_link_never_through_it(tmp_path):
    """A guard: entries/<stage>/<key> planted as a link to a user's folder is moved away as
    the link; the folder it points to keeps every file."""
    model = write_model(tmp_path / "model", data=weight_bytes())
    cache = tmp_path / "cache"
    key = stage_key(tmp_path, model, cache)
    entry = cache / "entries" / "sanitize" / key
    shutil.rmtree(entry)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("a,b\n1,2\n")
    os.symlink(mine, entry)
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"model.path={model}", DATA_OVERRIDE, cache=cache,
                      run_name="relinked")
    assert run.code == 0, run.stderr
    assert (mine / "results.csv").read_text() == "a,b\n1,2\n"
    assert entry.is_dir() and not entry.is_symlink()
