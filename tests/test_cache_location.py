"""Issue 14 item 16: the default cache is the user's cache directory, through the real
command line (every working directory shares it; TRTPIPE_CACHE and cache.dir override it;
the cache-safety rules hold there too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trtpipe.cache.cache_dir import CACHE_MARKER

STAGES = "stages=[sanitize]"


def run(workdir: Path, *overrides: str, env: dict) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    environment = {key: value for key, value in os.environ.items() if key not in ("TRTPIPE_CACHE", "XDG_CACHE_HOME")}
    environment.update(env)
    environment.pop("TRTPIPE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "trtpipe", STAGES, *overrides, f"hydra.run.dir={workdir / 'run'}"],
                          cwd=workdir, env=environment, capture_output=True, text=True, timeout=120)


def status(done: subprocess.CompletedProcess) -> str:
    line = [line for line in done.stdout.splitlines() if line.strip().startswith("sanitize ")][-1]
    return line.split()[1]


def test_two_working_directories_share_the_user_cache(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    downloads = tmp_path / "xdg" / "trtpipe" / "wild"  # the benchmarks keep their downloads beside the cache
    downloads.mkdir(parents=True)
    (downloads / "model.whl").write_text("not trtpipe's to touch")
    first = run(tmp_path / "project_a", env=env)
    assert first.returncode == 0, first.stderr
    second = run(tmp_path / "project_b", env=env)
    assert second.returncode == 0, second.stderr
    assert (status(first), status(second)) == ("ran", "cached")
    cache = tmp_path / "xdg" / "trtpipe" / "artifacts"
    assert (cache / CACHE_MARKER).is_file() and any((cache / "entries" / "sanitize").iterdir())
    assert not (tmp_path / "project_a" / "outputs" / "cache").exists()
    assert (downloads / "model.whl").read_text() == "not trtpipe's to touch"
    assert not (tmp_path / "home" / ".cache" / "trtpipe" / "artifacts").exists()


def test_without_xdg_the_cache_is_under_home(tmp_path):
    done = run(tmp_path / "work", env={"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": ""})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / ".cache" / "trtpipe" / "artifacts" / CACHE_MARKER).is_file()


def test_the_environment_variable_and_cache_dir_override_the_default(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "TRTPIPE_CACHE": str(tmp_path / "ci-cache")}
    by_env = run(tmp_path / "work", env=env)
    assert by_env.returncode == 0, by_env.stderr
    assert (tmp_path / "ci-cache" / CACHE_MARKER).is_file() and not (tmp_path / "xdg" / "trtpipe" / "artifacts").exists()
    by_key = run(tmp_path / "work2", f"cache.dir={tmp_path / 'explicit'}", env=env)
    assert by_key.returncode == 0, by_key.stderr
    assert status(by_key) == "ran" and (tmp_path / "explicit" / CACHE_MARKER).is_file()
    import json

    manifest = json.loads((tmp_path / "work2" / "run" / "manifest.json").read_text())
    assert manifest["config"]["cache"]["dir"] == str(tmp_path / "explicit")  # recorded resolved, for verify


def test_a_foreign_folder_at_the_default_location_is_refused_not_cleaned(tmp_path):
    foreign = tmp_path / "xdg" / "trtpipe" / "artifacts"
    (foreign / "tmp").mkdir(parents=True)
    (foreign / "tmp" / "notes.txt").write_text("mine")
    done = run(tmp_path / "work", env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert done.returncode == 2
    assert "is not a trtpipe cache" in done.stderr and "Fix:" in done.stderr
    assert (foreign / "tmp" / "notes.txt").read_text() == "mine"
    assert not (foreign / CACHE_MARKER).exists()


def test_an_old_cache_in_the_working_directory_is_named_not_used(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    work = tmp_path / "work"
    old = run(work, "cache.dir=outputs/cache", env=env)  # where earlier versions put it
    assert old.returncode == 0, old.stderr
    assert (work / "outputs" / "cache" / CACHE_MARKER).is_file()
    now = run(work, env=env)
    assert now.returncode == 0, now.stderr
    assert status(now) == "ran"  # the default cache, not the old one
    assert f"the cache is now {tmp_path / 'xdg' / 'trtpipe' / 'artifacts'}" in now.stdout
    assert "cache.dir=outputs/cache uses it" in now.stdout
    again = run(work, "cache.dir=outputs/cache", env=env)  # the printed fix works
    assert again.returncode == 0 and status(again) == "cached"
    assert "the cache is now" not in again.stdout


def test_only_a_folder_trtpipe_would_use_is_named_as_an_old_cache(tmp_path):
    """A bare entries/ beside other files may be anybody's: no `rm -r` of it is suggested."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    work = tmp_path / "work"
    foreign = work / "outputs" / "cache"
    (foreign / "entries").mkdir(parents=True)
    (foreign / "thesis.tex").write_text("mine")
    done = run(work, env=env)
    assert done.returncode == 0, done.stderr
    assert "the cache is now" not in done.stdout and "rm -r" not in done.stdout
    pasted = run(work, "cache.dir=outputs/cache", env=env)  # would not work: so it must not be suggested
    assert pasted.returncode == 2 and "is not a trtpipe cache" in pasted.stderr
    assert (foreign / "thesis.tex").read_text() == "mine"


def test_an_old_unmarked_cache_is_named_and_the_suggestion_works(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    work = tmp_path / "work"
    for sub in ("entries", "tmp", "locks", "index"):  # the layout of a cache written before markers
        (work / "outputs" / "cache" / sub).mkdir(parents=True)
    now = run(work, env=env)
    assert now.returncode == 0, now.stderr
    assert "cache.dir=outputs/cache uses it" in now.stdout
    pasted = run(work, "cache.dir=outputs/cache", env=env)
    assert pasted.returncode == 0, pasted.stderr
    assert "the cache is now" not in pasted.stdout


def test_a_relative_trtpipe_cache_is_recorded_absolute(tmp_path):
    import json

    done = run(tmp_path / "work", env={"TRTPIPE_CACHE": "rel-cache", "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "work" / "run" / "manifest.json").read_text())
    assert manifest["config"]["cache"]["dir"] == str(tmp_path / "work" / "rel-cache")
    assert (tmp_path / "work" / "rel-cache" / CACHE_MARKER).is_file()
