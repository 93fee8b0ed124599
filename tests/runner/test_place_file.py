"""How a cache file lands in a run directory (cache/files.place_file) and how an unchanged output
shares its input's file (cache/cache.link_unchanged_files): issue 33, item 1, on real files."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from trtpipe.cache.cache import link_unchanged_files
from trtpipe.cache.files import place_file
from trtpipe.cache.hashing import sha256_file


def entry_file(folder, name="model.onnx", data=b"weights" * 1000, mode=0o644):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_a_link_shares_the_inode_and_makes_it_read_only(tmp_path):
    source = entry_file(tmp_path / "entry")
    how = place_file(source, tmp_path / "run" / "model.onnx", link=True)
    placed = tmp_path / "run" / "model.onnx"
    if how == "reflink":  # btrfs, XFS: a private copy-on-write file instead
        assert placed.stat().st_ino != source.stat().st_ino
        return
    assert how == "link" and placed.stat().st_ino == source.stat().st_ino
    assert stat.S_IMODE(source.stat().st_mode) == 0o444, "no user without root writes the shared file in place"


def test_without_link_a_private_copy_with_the_source_permissions(tmp_path):
    source = entry_file(tmp_path / "entry", mode=0o600)
    assert place_file(source, tmp_path / "run" / "plan.json", link=False) in ("copy", "reflink")
    placed = tmp_path / "run" / "plan.json"
    assert placed.stat().st_nlink == 1 and stat.S_IMODE(placed.stat().st_mode) == 0o600
    assert placed.read_bytes() == source.read_bytes()


def test_a_rerun_replaces_the_name_and_leaves_the_earlier_file_alone(tmp_path):
    old, new = entry_file(tmp_path / "old", data=b"old"), entry_file(tmp_path / "new", data=b"new")
    target = tmp_path / "run" / "model.onnx"
    place_file(old, target, link=True)
    place_file(new, target, link=True)
    assert target.read_bytes() == b"new" and old.read_bytes() == b"old"


def test_across_file_systems_a_copy(tmp_path):
    mount = tmp_path / "other"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        source = entry_file(tmp_path / "entry")
        assert place_file(source, mount / "run" / "model.onnx", link=True) == "copy"
        assert (mount / "run" / "model.onnx").read_bytes() == source.read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_an_output_equal_to_an_input_file_becomes_a_link_to_it(tmp_path):
    earlier = entry_file(tmp_path / "entries" / "sanitize", mode=0o444)
    building = tmp_path / "tmp" / "entry"
    same = entry_file(building, "model.onnx", data=earlier.read_bytes())
    other = entry_file(building, "precision_plan.json", data=b"{}")
    files = {path.name: sha256_file(path) for path in (same, other)}
    link_unchanged_files(building, files, {earlier: sha256_file(earlier)})
    assert same.stat().st_ino == earlier.stat().st_ino and same.read_bytes() == earlier.read_bytes()
    assert other.stat().st_nlink == 1
    assert sorted(os.listdir(building)) == ["model.onnx", "precision_plan.json"], "no staged name left behind"
