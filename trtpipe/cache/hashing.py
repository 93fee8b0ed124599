"""Canonical JSON and file digests: the vocabulary of cache keys and manifests."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_CHUNK = 8 * 1024 * 1024
TREE_MIN_BYTES = 256 << 20
_TREE_CHUNK = 16 << 20
_HASH_THREADS = 2


def canonical_json(value: Any) -> bytes:
    """One byte sequence per value: sorted keys, no whitespace, UTF-8.

    Decision: the key format is pinned by a golden test; change it only deliberately.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The file's SHA-256; for files over `TREE_MIN_BYTES`, the SHA-256 of its chunks' SHA-256s.

    Decision: SHA-256 runs at ~1 GB/s on one core here, and a run of a 2.7 GB
    model hashes about 10 GB (the source and each stage's output): 10 s of a
    30 s run. Chunks hash on two threads (hashlib releases the GIL), halving
    that. Files below the threshold (every small model, JSON, plan) keep the
    plain SHA-256 that `sha256sum` prints; the digest of a large file is
    checked with `trtpipe-verify`, not `sha256sum`.
    """
    size = os.path.getsize(path)
    if size < TREE_MIN_BYTES:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()
    buffers = threading.local()  # one reused buffer per thread: fresh 16 MiB allocations cost page faults
    with open(path, "rb") as handle, ThreadPoolExecutor(max_workers=_HASH_THREADS) as pool:
        def chunk_digest(offset: int) -> bytes:
            buffer = getattr(buffers, "data", None) or bytearray(_TREE_CHUNK)
            buffers.data = buffer
            read = os.preadv(handle.fileno(), [buffer], offset)
            return hashlib.sha256(memoryview(buffer)[:read]).digest()

        digests = pool.map(chunk_digest, range(0, size, _TREE_CHUNK))
        tree = hashlib.sha256(b"trtpipe-sha256-tree:%d:" % _TREE_CHUNK)
        for digest in digests:
            tree.update(digest)
    return tree.hexdigest()


def artifact_digest(path: Path, known: Mapping[str, str] | None = None,
                    locations: list[str] | None = None) -> str:
    """Digest of an artifact, including the external data files of an ONNX model.

    Decision: a model's identity is its protobuf plus every external data file it
    references, so editing a `.data` file changes the digest like editing weights
    inline would. `known`: file name -> sha256 of files in the same directory already
    hashed by the caller (the cache hashes every file of an entry once). `locations`:
    the model's external data files when the caller has already read them.
    """
    path = Path(path)
    known = known or {}

    def file_digest(file: Path) -> str:
        return known.get(file.name) or sha256_file(file)

    if path.suffix != ".onnx":
        return file_digest(path)
    if locations is None:
        locations = external_data_locations(path)
    if not locations:
        return file_digest(path)
    digest = hashlib.sha256(file_digest(path).encode())
    for location in locations:
        digest.update(canonical_json([location, file_digest(path.parent / location)]))
    return digest.hexdigest()


def external_data_locations(path: Path) -> list[str]:
    """Sorted external data file names an ONNX file refers to (its own data not loaded)."""
    import onnx  # heavy; imported where needed

    return locations_in(onnx.load(str(path), load_external_data=False))


def locations_in(model) -> list[str]:
    """Sorted external data file names a loaded (not data-loaded) ModelProto refers to."""
    import onnx

    from trtpipe.onnxmodel.model_parts import all_tensors

    locations = set()
    for tensor in all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    return sorted(locations)
