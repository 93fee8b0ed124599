"""Cache safety (issue 13, items 1-4): the cache deletes only what trtpipe created, liveness is a
lock, planted records cannot steer file access, and every cache input is verified.

Each test reproduces a case that went wrong before the fix (its docstring says what happened)."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing
import os
import socket
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_trtpipe
from trtpipe.errors import UserError
from trtpipe.cache.cache import ArtifactCache, cache_key
from trtpipe.cache.cache_dir import CACHE_MARKER, TMP_MARKER
from trtpipe.cache.hashing import sha256_file
from trtpipe.cache.publish import RunDirPublisher

MATERIAL = {"stage": "sanitize", "version": "1", "config": {}, "inputs": {"model": "0" * 64}, "tools": {}}
TWO_DAYS = 2 * 24 * 3600


def write_model(text: str):
    def compute(out_dir: Path) -> dict:
        (out_dir / "model.bin").write_text(text)
        return {"outputs": {"model": "model.bin"}, "summary": f"wrote {text}"}

    return compute


def make_old(path: Path) -> None:
    old = time.time() - TWO_DAYS
    os.utime(path, (old, old))


def dead_pid() -> int:
    process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    process.start()
    process.join()
    return process.pid


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# 1. Never delete what trtpipe did not create --------------------------------------------------

def test_project_folder_as_cache_is_refused_and_left_untouched(tmp_path):
    """Reproduced: cache.dir=<a project folder> made trtpipe create entries/, tmp/, … in it and
    delete every folder under its tmp/ older than a day (the user's scratch work)."""
    project = tmp_path / "project"
    (project / "tmp" / "experiment").mkdir(parents=True)
    (project / "tmp" / "experiment" / "results.csv").write_text("a,b\n1,2\n")
    (project / "notes.txt").write_text("mine")
    make_old(project / "tmp" / "experiment")
    before = sorted(str(p) for p in project.rglob("*"))
    with pytest.raises(UserError, match="not a trtpipe cache") as raised:
        ArtifactCache(project)
    assert "empty or new folder" in raised.value.fix
    assert sorted(str(p) for p in project.rglob("*")) == before


def test_cli_refuses_a_non_cache_folder_in_one_line(tmp_path):
    """Reproduced: TRTPIPE_CACHE=$HOME-like folder was used (and its old tmp/ folders deleted)."""
    home = tmp_path / "home"
    (home / "tmp" / "old").mkdir(parents=True)
    make_old(home / "tmp" / "old")
    run = run_trtpipe(tmp_path, "stages=[sanitize]", cache=home)
    assert run.code == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a trtpipe cache" in lines[0] and CACHE_MARKER in lines[0], run.stderr
    assert (home / "tmp" / "old").is_dir()
    assert sorted(p.name for p in home.iterdir()) == ["tmp"]


@pytest.mark.parametrize("sub", ["tmp", "entries"])
def test_symlinked_tmp_is_refused_and_its_target_untouched(tmp_path, sub):
    """Reproduced: a cache whose tmp/ linked to a user folder had that folder's old subfolders deleted."""
    ArtifactCache(tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "old-work").mkdir(parents=True)
    (elsewhere / "old-work" / "data.txt").write_text("keep")
    make_old(elsewhere / "old-work")
    (tmp_path / "cache" / sub).rmdir()
    (tmp_path / "cache" / sub).symlink_to(elsewhere)
    with pytest.raises(UserError, match="symbolic link"):
        ArtifactCache(tmp_path / "cache")
    assert (elsewhere / "old-work" / "data.txt").read_text() == "keep"


def test_unmarked_folders_in_tmp_are_never_deleted(tmp_path):
    """Reproduced: any folder in tmp/ older than a day, or named <host>-<dead pid>-*, was deleted."""
    root = tmp_path / "cache"
    ArtifactCache(root)
    named_like_dead_writer = root / "tmp" / f"{socket.gethostname()}-{dead_pid()}-abcdef123456"
    old = root / "tmp" / "someone-elses"
    for folder in (named_like_dead_writer, old):
        folder.mkdir()
        (folder / "file").write_text("x")
    make_old(old)
    ArtifactCache(root)
    assert named_like_dead_writer.is_dir() and old.is_dir()


def test_new_folder_is_marked_and_old_unmarked_cache_is_adopted_with_its_entries(tmp_path):
    """A cache written before markers existed (entries/, tmp/, locks/, index/ only) keeps hitting."""
    root = tmp_path / "cache"
    ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("a"))
    marker = json.loads((root / CACHE_MARKER).read_text())
    assert marker["tool"] == "trtpipe" and isinstance(marker["format"], int)
    (root / CACHE_MARKER).unlink()  # what a cache of an earlier version looks like
    result = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("never called"))
    assert result.status == "cached"
    assert (root / CACHE_MARKER).is_file()


@pytest.mark.parametrize("extra", ["thesis.tex", "src"])
def test_unmarked_cache_lookalike_with_foreign_content_is_refused(tmp_path, extra):
    root = tmp_path / "cache"
    for sub in ("entries", "tmp", "locks", "index"):
        (root / sub).mkdir(parents=True)
    (root / extra).write_text("mine") if "." in extra else (root / extra).mkdir()
    with pytest.raises(UserError, match="not a trtpipe cache"):
        ArtifactCache(root)
    assert not (root / CACHE_MARKER).exists()


def test_cache_of_a_newer_format_is_refused(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    (root / CACHE_MARKER).write_text(json.dumps({"tool": "trtpipe", "format": 999}))
    with pytest.raises(UserError, match="newer"):
        ArtifactCache(root)


# 2. Liveness of a writer is a lock, not a PID -------------------------------------------------

def _hold_temporary(folder: str, ready: str, release: str) -> None:
    """A writer in another PID namespace, as its temporary looks from here: named after a PID
    that is dead here, marked, and locked by a live process."""
    Path(folder).mkdir()
    fd = os.open(Path(folder) / f".{TMP_MARKER}.partial", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(Path(folder) / f".{TMP_MARKER}.partial", Path(folder) / TMP_MARKER)
    (Path(folder) / "entry").mkdir()
    (Path(folder) / "entry" / "model.onnx").write_text("half written")
    Path(ready).write_text("")
    while not Path(release).exists():
        time.sleep(0.01)


def test_live_writer_with_a_dead_looking_pid_keeps_its_temporary(tmp_path):
    """Reproduced: containers sharing a host name but not a PID namespace deleted each other's
    in-progress temporaries (kill(pid, 0) said the writer was dead)."""
    root = tmp_path / "cache"
    ArtifactCache(root)
    folder = root / "tmp" / f"{socket.gethostname()}-{dead_pid()}-abcdef123456"
    ready, release = tmp_path / "ready", tmp_path / "release"
    writer = multiprocessing.get_context("spawn").Process(target=_hold_temporary,
                                                          args=(str(folder), str(ready), str(release)))
    writer.start()
    try:
        deadline = time.time() + 60
        while not ready.exists():
            assert time.time() < deadline and writer.is_alive(), "the writer never started"
            time.sleep(0.01)
        make_old(folder)
        ArtifactCache(root)  # cleanup runs here
        assert (folder / "entry" / "model.onnx").read_text() == "half written"
    finally:
        release.write_text("")
        writer.join(timeout=60)
    ArtifactCache(root)  # the writer is gone, its lock free: its marked temporary is removed
    assert not folder.exists()


def test_a_failed_build_leaves_no_temporary_and_a_crashed_one_is_cleaned(tmp_path):
    root = tmp_path / "cache"
    cache = ArtifactCache(root)

    def crash(out_dir: Path) -> dict:
        (out_dir / "model.bin").write_text("partial")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("sanitize", MATERIAL, crash)
    assert list((root / "tmp").iterdir()) == []
    # A writer killed mid-build leaves a marked temporary whose lock the kernel released.
    crashed = root / "tmp" / "crashed"
    (crashed / "entry").mkdir(parents=True)
    (crashed / TMP_MARKER).write_text("")
    ArtifactCache(root)
    assert not crashed.exists()


# 3. Cache records cannot steer file access ----------------------------------------------------

def _plant(root: Path, mutate) -> Path:
    """Build an entry, then rewrite its entry.json with `mutate(record, entry_dir)`."""
    ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("genuine"))
    entry = root / "entries" / "sanitize" / cache_key(MATERIAL)
    record = json.loads((entry / "entry.json").read_text())
    mutate(record, entry)
    (entry / "entry.json").write_text(json.dumps(record))
    return entry


@pytest.mark.parametrize("name", ["../../../../secret.txt", "SECRET_ABS", "", ".", "sub/model.bin", "..\\x"])
def test_planted_file_name_is_discarded_not_followed(tmp_path, caplog, name):
    """Reproduced: a recorded name like ../../../../secret.txt made trtpipe use the file outside
    the entry as the stage's output and hard-link it into (and outside) the run directory."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's secret")
    name = str(secret) if name == "SECRET_ABS" else name

    def mutate(record, entry):
        record["files"] = {name: sha256_file(secret)}
        record["outputs"]["model"] = {"file": name, "sha256": sha256_file(secret)}

    root = tmp_path / "cache"
    entry = _plant(root, mutate)
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        result = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("rebuilt"))
        publisher = RunDirPublisher(run_dir)
        publisher.publish(result.entry, "sanitize")
        publisher.finish(succeeded=True)
    assert result.status == "ran" and "discarded" in caplog.text
    assert result.entry.output_path("model").parent == entry
    assert result.entry.output_path("model").read_text() == "rebuilt"
    assert sorted(files_under(run_dir)) == ["sanitize/model.bin"]
    assert secret.read_text() == "the user's secret" and os.stat(secret).st_nlink == 1


def test_symlink_inside_an_entry_is_discarded(tmp_path, caplog):
    """Reproduced: an entry file replaced by a symlink to a file elsewhere (same digest) was used."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's secret")

    def mutate(record, entry):
        (entry / "model.bin").unlink()
        (entry / "model.bin").symlink_to(secret)
        record["files"]["model.bin"] = sha256_file(secret)

    _plant(tmp_path / "cache", mutate)
    with caplog.at_level(logging.WARNING):
        result = ArtifactCache(tmp_path / "cache").get_or_compute("sanitize", MATERIAL, write_model("rebuilt"))
    assert result.status == "ran" and "not a regular file" in caplog.text
    assert not result.entry.output_path("model").is_symlink()


# 4. Every cache input is verified -------------------------------------------------------------

@pytest.mark.parametrize("text", ["[]", "42", '"entry"', "null",
                                  "FILES_LIST", "DIGEST_INT", "OUTPUTS_LIST", "SUMMARY_LIST", "CONSOLE_OUTSIDE",
                                  "MATERIAL_EDITED", "MATERIAL_NAN"])
def test_record_not_matching_the_schema_is_rebuilt(tmp_path, caplog, text):
    """Reproduced: a non-object entry.json (or wrong field types) ended every later run with
    an AttributeError/TypeError instead of a rebuild."""
    def mutate(record, entry):
        pass

    root = tmp_path / "cache"
    entry = _plant(root, mutate)
    record = json.loads((entry / "entry.json").read_text())
    broken = {
        "FILES_LIST": {**record, "files": list(record["files"])},
        "DIGEST_INT": {**record, "files": {"model.bin": 7}},
        "OUTPUTS_LIST": {**record, "outputs": [record["outputs"]["model"]]},
        "SUMMARY_LIST": {**record, "summary": ["x"]},
        "CONSOLE_OUTSIDE": {**record, "console_file": "../../../../secret.txt"},
        "MATERIAL_EDITED": {**record, "material": {**record["material"], "version": "2"}},
        "MATERIAL_NAN": {**record, "material": {**record["material"], "config": {"x": float("nan")}}},
    }
    (entry / "entry.json").write_text(json.dumps(broken[text]) if text in broken else text)
    with caplog.at_level(logging.WARNING):
        result = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("rebuilt"))
    assert result.status == "ran" and "discarded" in caplog.text
    assert result.entry.output_path("model").read_text() == "rebuilt"


@pytest.mark.parametrize("damage", ["flip", "garble"])
def test_corrupted_builtin_model_is_regenerated_with_a_warning(tmp_path, caplog, damage):
    """Reproduced: a flipped byte in the cached built-in model was used silently; a garbled one
    ended every run in an internal error."""
    import onnx

    from trtpipe.source import resolve_model_source

    root = tmp_path / "cache"
    ArtifactCache(root)
    path = resolve_model_source(None, "transformer", root, tmp_path)
    genuine = path.read_bytes()
    data = bytearray(genuine)
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data[: len(data) // 2] = b"\x00garbage" * (len(data) // 16)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        again = resolve_model_source(None, "transformer", root, tmp_path)
    assert again == path and again.read_bytes() == genuine
    assert "does not match its recorded sha256" in caplog.text
    onnx.checker.check_model(str(again))


def test_builtin_model_without_a_recorded_digest_is_regenerated(tmp_path):
    """Caches from before the digest record: the model is regenerated once and then trusted."""
    from trtpipe.source import resolve_model_source

    root = tmp_path / "cache"
    ArtifactCache(root)
    path = resolve_model_source(None, "transformer", root, tmp_path)
    record = path.with_name(path.name + ".sha256")
    record.unlink()
    path.write_bytes(b"not the model")
    assert resolve_model_source(None, "transformer", root, tmp_path).read_bytes() != b"not the model"
    assert record.read_text() == sha256_file(path)


def test_symlinked_builtin_folder_is_not_followed(tmp_path, caplog):
    """Reproduced: a builtin/<model>/ folder linked elsewhere (with a planted model and digest) was used."""
    from trtpipe.source import resolve_model_source

    root = tmp_path / "cache"
    ArtifactCache(root)
    path = resolve_model_source(None, "transformer", root, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    path.parent.rename(elsewhere)
    (elsewhere / "model.onnx").write_bytes(b"planted")
    (elsewhere / "model.onnx.sha256").write_text(sha256_file(elsewhere / "model.onnx"))
    path.parent.symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING):
        again = resolve_model_source(None, "transformer", root, tmp_path)
    assert "symbolic link" in caplog.text
    assert not again.parent.is_symlink() and again.read_bytes() != b"planted"
    assert (elsewhere / "model.onnx").read_bytes() == b"planted"


@pytest.mark.parametrize("memo", ["[]", '{"PATH": {"sha256": 1}}', '{"PATH": []}'])
def test_damaged_digest_memo_costs_a_rehash_not_a_crash(tmp_path, memo):
    """Reproduced: a non-object source digest memo ended every run with an AttributeError."""
    from trtpipe.cache.digest_memo import _MEMO_FILE, memoised_digest

    model = tmp_path / "model.bin"
    model.write_text("weights")
    index = tmp_path / "index"
    index.mkdir()
    (index / _MEMO_FILE).write_text(memo.replace("PATH", str(model.resolve())))
    assert memoised_digest(model, index) == sha256_file(model)


@pytest.mark.parametrize("index", ["{\"a\": 1}", "[1, \"x\"]", "7"])
def test_damaged_miss_index_is_ignored(tmp_path, index):
    """Reproduced: an index/<stage>.json that was not a list of objects crashed the next build."""
    root = tmp_path / "cache"
    ArtifactCache(root)
    (root / "index" / "sanitize.json").write_text(index)
    result = ArtifactCache(root).get_or_compute("sanitize", MATERIAL, write_model("a"))
    assert result.status == "ran"
