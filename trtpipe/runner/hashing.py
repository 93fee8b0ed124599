"""Canonical JSON and file digests: the vocabulary of cache keys and manifests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_CHUNK = 8 * 1024 * 1024


def canonical_json(value: Any) -> bytes:
    """One byte sequence per value: sorted keys, no whitespace, UTF-8.

    Decision: the key format is pinned by a golden test; change it only deliberately.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def artifact_digest(path: Path, known: Mapping[str, str] | None = None) -> str:
    """Digest of an artifact, including the external data files of an ONNX model.

    Decision: a model's identity is its protobuf plus every external data file it
    references, so editing a `.data` file changes the digest like editing weights
    inline would. `known`: file name -> sha256 of files in the same directory already
    hashed by the caller (the cache hashes every file of an entry once).
    """
    path = Path(path)
    known = known or {}

    def file_digest(file: Path) -> str:
        return known.get(file.name) or sha256_file(file)

    if path.suffix != ".onnx":
        return file_digest(path)
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

    locations = set()
    for tensor in onnx.external_data_helper._get_all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    return sorted(locations)
