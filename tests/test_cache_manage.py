"""`trtpipe-cache` (info, prune, clear) and `cache.max_size` (issue 24, item 4), through the real
commands in subprocesses on a cache that real runs filled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.cli_helpers import run_trtpipe

STAGES = "stages=[sanitize,precision]"
# Three configs with their own sanitize (and so precision) entries.
A = ()
B = ("sanitize.fold_constants=false",)
C = ("sanitize.cleanup=false",)
TWO_DAYS = 2 * 24 * 3600


def cache_cmd(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRTPIPE_CACHE": str(cache)}  # the same resolution as trtpipe's
    return subprocess.run([sys.executable, "-m", "trtpipe.cache_cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def run(workdir: Path, cache: Path, config: tuple[str, ...], name: str, *extra: str):
    done = run_trtpipe(workdir, STAGES, *config, *extra, cache=cache, run_name=name)
    assert done.code == 0, done.stderr
    return done


def entry_dirs(cache: Path, done) -> list[Path]:
    return [cache / "entries" / stage["name"] / stage["key"] for stage in done.manifest["stages"]]


def unique_bytes(paths) -> int:
    sizes = {}
    for path in paths:
        info = os.lstat(path)
        if path.is_file() and not path.is_symlink():
            sizes[(info.st_dev, info.st_ino)] = info.st_size
    return sum(sizes.values())


def disk_bytes(top: Path) -> int:
    return unique_bytes(top.rglob("*"))


def present(cache: Path) -> set[Path]:
    return {p for p in (cache / "entries").glob("*/*") if p.is_dir()}


def test_info_numbers_match_the_files_on_disk(tmp_path):
    cache = tmp_path / "cache"
    first, second = run(tmp_path, cache, A, "a"), run(tmp_path, cache, B, "b")
    info = json.loads(cache_cmd(cache, "info", "--json").stdout)
    assert info["location"] == str(cache)
    assert info["bytes"] == disk_bytes(cache)
    dirs = entry_dirs(cache, first) + entry_dirs(cache, second)
    assert info["entries"] == len(dirs) == 4
    assert info["entries_bytes"] == unique_bytes(p for d in dirs for p in d.iterdir())
    for stage in ("sanitize", "precision"):
        mine = [d for d in dirs if d.parent.name == stage]
        assert info["stages"][stage] == {"entries": 2, "bytes": sum(unique_bytes(d.iterdir()) for d in mine)}
    uses = [os.lstat(d).st_mtime for d in dirs]
    assert (info["oldest_use"], info["newest_use"]) == (min(uses), max(uses))
    text = cache_cmd(cache, "info")
    assert text.returncode == 0 and str(cache) in text.stdout and "sanitize" in text.stdout


def test_prune_max_size_keeps_the_most_recently_used(tmp_path):
    cache = tmp_path / "cache"
    a, b, c = run(tmp_path, cache, A, "a"), run(tmp_path, cache, B, "b"), run(tmp_path, cache, C, "c")
    again = run(tmp_path, cache, A, "a2")  # a hit is a use: A is now the most recent, B the least
    assert set(again.statuses().values()) == {"cached"}
    b_bytes = unique_bytes(p for d in entry_dirs(cache, b) for p in d.iterdir())
    limit = disk_bytes(cache) - b_bytes
    done = cache_cmd(cache, "prune", "--max-size", str(limit))
    assert done.returncode == 0, done.stderr
    assert disk_bytes(cache) <= limit
    assert present(cache) == set(entry_dirs(cache, a) + entry_dirs(cache, c))
    assert "deleted 2 entries" in done.stdout
    # Units: 1k is 1000 bytes (as ccache); everything deletable goes.
    assert cache_cmd(cache, "prune", "--max-size", "1k").returncode == 0
    assert present(cache) == set()


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from filelock import FileLock
    from trtpipe.cache.cache import ArtifactCache
    root, key, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if how == "computing":  # the key lock a process computing the entry holds (cache.py)
        lock = FileLock(str(root / "locks" / f"{key}.lock")); lock.acquire()
    else:  # a run that used the entry: ArtifactCache holds it until the run ends
        import json
        entry = root / "entries" / "sanitize" / key
        material = json.loads((entry / "entry.json").read_text())["material"]
        cache = ArtifactCache(root, hold_entries=True)
        assert cache.get_or_compute("sanitize", material, None).status == "cached"
    print("held", flush=True)
    sys.stdin.read()
""")


def hold(cache: Path, key: str, how: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache), key, how], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_an_entry_another_process_holds_survives(tmp_path):
    cache = tmp_path / "cache"
    a, b = run(tmp_path, cache, A, "a"), run(tmp_path, cache, B, "b")
    computing, used = entry_dirs(cache, a)[0], entry_dirs(cache, b)[0]
    holders = [hold(cache, computing.name, "computing"), hold(cache, used.name, "used"),
               hold(cache, used.name, "used")]  # two runs share an entry
    try:
        done = cache_cmd(cache, "clear")
        assert done.returncode == 0, done.stderr
        assert present(cache) == {computing, used}
        assert "kept 2 entries a running trtpipe holds" in done.stdout
        done = cache_cmd(cache, "prune", "--max-size", "0")
        assert present(cache) == {computing, used}
    finally:
        for holder in holders:
            holder.communicate("", timeout=60)
    assert cache_cmd(cache, "clear").returncode == 0
    assert present(cache) == set()


def test_older_than_deletes_entries_not_used_since(tmp_path):
    cache = tmp_path / "cache"
    old = run(tmp_path, cache, A, "a")
    then = time.time() - TWO_DAYS
    for directory in entry_dirs(cache, old):
        os.utime(directory, (then, then))
    new = run(tmp_path, cache, B, "b")
    done = cache_cmd(cache, "prune", "--older-than", "1d")
    assert done.returncode == 0, done.stderr
    assert present(cache) == set(entry_dirs(cache, new))
    assert not list((cache / "tmp").iterdir())  # deleted through tmp/, nothing left there


def test_clear_then_a_run_rebuilds(tmp_path):
    cache = tmp_path / "cache"
    run(tmp_path, cache, A, "a")
    assert cache_cmd(cache, "clear").returncode == 0
    assert present(cache) == set()
    assert json.loads(cache_cmd(cache, "info", "--json").stdout)["entries"] == 0
    assert set(run(tmp_path, cache, A, "a2").statuses().values()) == {"ran"}


def test_cache_max_size_is_enforced_after_a_run(tmp_path):
    cache = tmp_path / "cache"
    a = run(tmp_path, cache, A, "a")
    b = run(tmp_path, cache, B, "b", "cache.max_size=1")
    assert present(cache) == set(entry_dirs(cache, b))  # never the entries this run used
    lines = [line for line in (b.stdout + b.stderr).splitlines() if "cache.max_size=1:" in line]
    assert len(lines) == 1 and "deleted 2 least recently used cache entries" in lines[0]
    # A later run re-runs the pruned stages and still works (and gives the same artifacts).
    again = run(tmp_path, cache, A, "a2")
    assert set(again.statuses().values()) == {"ran"}
    assert [s["outputs"] for s in again.manifest["stages"]] == [s["outputs"] for s in a.manifest["stages"]]
    quiet = run(tmp_path, cache, A, "a3", "cache.max_size=10G")
    assert "cache.max_size=10G:" not in quiet.stdout + quiet.stderr and len(present(cache)) == 4


def test_the_console_script_is_declared():
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["trtpipe-cache"] == "trtpipe.cache_cli:main"


def test_errors_are_one_line_exit_2(tmp_path):
    cache = tmp_path / "cache"
    run(tmp_path, cache, A, "a")
    before = {p: os.lstat(p).st_mtime_ns for p in present(cache)}
    for args in (("prune", "--max-size", "12X"), ("prune", "--older-than", "7"), ("prune",)):
        done = cache_cmd(cache, *args)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr
    stranger = tmp_path / "project"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    done = cache_cmd(cache, "clear", "--dir", str(stranger))
    assert done.returncode == 2 and "is not a trtpipe cache" in done.stderr and len(done.stderr.splitlines()) == 1
    assert (stranger / "notes.txt").read_text() == "mine"
    bad = run_trtpipe(tmp_path, STAGES, "cache.max_size=12X", cache=cache, run_name="bad")
    assert bad.code == 2 and "cache.max_size '12X' is not a size" in bad.stderr and "cache.max_size=2G" in bad.stderr
    assert {p: os.lstat(p).st_mtime_ns for p in present(cache)} == before
