"""What the model states about its generated sample inputs, remembered per model digest.

Decision (issue 33, item 6): before any stage the runner reads the source model for the ranges
of its integer inputs and the shapes of its dynamic ones (data.with_model_ranges). That loads the
model with onnx (and onnx imports NumPy): ~0.2 s of a fully cached run, the same answer every
time for the same model and data block. The answer (the completed data block, the ranges read
and the shape lines printed) is kept in the cache's `index/` under a key of:
- the model's sha256 (the digest the run already has, from cache/digest_memo.py);
- the data block as resolved (seed, iterations, every data.inputs spec) and data.sequence_length;
- the onnx version and the source of every trtpipe module that computes the answer (`CODE`;
  tests/test_front_door_memo.py checks the list holds every module with_model_ranges imports),
  so an edited checkout or another onnx is a miss.
Only the generated-data case is remembered (a data.path run reads its files with NumPy anyway),
only answers (an error is raised again each run, with its own message), at most `_LIMIT` of
them (the oldest dropped). The file is JSON (nothing in it runs), written whole and renamed; a
file that cannot be read or written is a miss, never an error. Two runs writing at once may
drop one's answer: that run's model is read again next time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_FILE = "model-inputs-v1.json"
_LIMIT = 256
_PACKAGE = Path(__file__).resolve().parents[1]  # trtpipe/
# The modules whose code decides the answer (data.with_model_ranges and what it imports).
CODE = ("data.py", "sample_dims.py", "memo/model_inputs.py", "numerics/input_ranges.py", "numerics/inputs.py",
        "numerics/input_types.py", "numerics/sample_values.py", "onnxmodel/input_dims.py", "config/override_text.py",
        "errors.py", "safe_text.py", "cache/hashing.py")


def memo_key(model_sha256: str, data: dict, sequence_length: int) -> str | None:
    """None when the data block is not plain JSON (then nothing is remembered)."""
    from trtpipe.cache.tools import distribution_version

    try:
        material = json.dumps({"model": model_sha256, "data": data, "sequence_length": sequence_length,
                               "onnx": distribution_version("onnx"),
                               "code": {name: _digest(_PACKAGE / name) for name in CODE}},
                              sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, OSError):
        return None
    return hashlib.sha256(material.encode()).hexdigest()


def recall(index_dir: Path, key: str) -> dict | None:
    """The answer stored under `key`: {"data": ..., "read": {name: {low, high, reason, ...}},
    "shaped": {name: line}}, or None."""
    entry = _read(Path(index_dir) / _FILE).get(key)
    return entry if isinstance(entry, dict) and {"data", "read", "shaped"} <= set(entry) else None


def remember(index_dir: Path, key: str, answer: dict) -> None:
    from trtpipe.cache.files import write_atomic

    path = Path(index_dir) / _FILE
    try:
        if path.parent.is_symlink() or not path.parent.is_dir():
            return
        entries = _read(path)
        entries.pop(key, None)
        entries[key] = answer  # last: the newest
        kept = dict(list(entries.items())[-_LIMIT:])
        write_atomic(path, json.dumps(kept, sort_keys=False, allow_nan=False).encode())
    except (OSError, TypeError, ValueError):  # a read-only or full cache, an answer that is not JSON
        return


def _read(path: Path) -> dict:
    try:
        if path.is_symlink():
            return {}
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
