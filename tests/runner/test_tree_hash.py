"""Large files hash as a SHA-256 tree of chunk digests (two threads); small files as plain SHA-256."""

import hashlib

import pytest

from trtpipe.cache import hashing


@pytest.fixture
def small_tree(monkeypatch):
    monkeypatch.setattr(hashing, "TREE_MIN_BYTES", 1000)
    monkeypatch.setattr(hashing, "_TREE_CHUNK", 256)


def test_small_files_keep_the_plain_sha256(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 5000)
    assert hashing.sha256_file(path) == hashlib.sha256(b"x" * 5000).hexdigest()


def test_large_files_hash_as_a_tree_of_chunk_digests(tmp_path, small_tree):
    data = bytes(range(256)) * 10 + b"tail"  # 2564 bytes: 10 full chunks and a short one
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    chunks = [data[i:i + 256] for i in range(0, len(data), 256)]
    tree = hashlib.sha256(b"trtpipe-sha256-tree:256:")
    for chunk in chunks:
        tree.update(hashlib.sha256(chunk).digest())
    assert hashing.sha256_file(path) == tree.hexdigest()
    assert hashing.sha256_file(path) != hashlib.sha256(data).hexdigest()


def test_every_byte_of_a_large_file_counts(tmp_path, small_tree):
    path = tmp_path / "f.bin"
    data = bytearray(b"\0" * 3000)
    path.write_bytes(data)
    first = hashing.sha256_file(path)
    for position in (0, 255, 256, 2999):
        changed = bytearray(data)
        changed[position] = 1
        path.write_bytes(changed)
        assert hashing.sha256_file(path) != first, position
    path.write_bytes(data + b"\0")  # one more zero byte: a different file
    assert hashing.sha256_file(path) != first
