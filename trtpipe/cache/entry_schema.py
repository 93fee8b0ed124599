"""The schema of a cache entry's record (entry.json): what must hold before anything trusts it.

Decision: a record is data that anyone with write access to the cache could have planted,
so it may not steer file access. Every file name it records must be a plain name of a
regular file directly inside the entry (no separator, no `..`, not absolute, not empty,
not a symlink); every field has the type trtpipe writes. A record that breaks any rule
makes the entry corrupt: it is discarded with a warning and rebuilt, never an error.
"""

from __future__ import annotations

import re
from pathlib import Path

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Optional fields a stage's result adds (StageOutcome), with the types trtpipe writes.
_OPTIONAL_FIELDS = {
    "summary": (str,),
    "status": (str,),
    "details": (dict,),
    "console_file": (str, type(None)),
    "stop": (bool,),
    "failed": (str, type(None)),
    "trtpipe": (str,),
}


def plain_name_problem(name: object) -> str | None:
    """Why `name` is not a plain file name inside a directory, or None."""
    if not isinstance(name, str) or not name:
        return f"file name {name!r} is not a non-empty string"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return f"file name {name!r} is not a plain name inside the entry"
    return None


def listed_files_problem(record: object, stage: str, key: str) -> str | None:
    """Why `record` cannot name the files of entry `stage`/`key`, or None: checked before any
    file it names is fetched from a remote (cache/remote/fetch.py) and as part of `record_problem`."""
    if not isinstance(record, dict):
        return f"the record is a {type(record).__name__}, not an object"
    if record.get("stage") != stage or record.get("key") != key:
        return "the record names another stage or key"
    if not isinstance(record.get("material"), dict):
        return "'material' is not an object"
    files = record.get("files")
    if not isinstance(files, dict):
        return "'files' is not an object"
    for name, digest in files.items():
        problem = plain_name_problem(name)
        if problem:
            return problem
        if name == "entry.json":
            return "the record lists its own entry.json among its files"
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            return f"the digest of {name!r} is not a sha256"
    return None


def record_problem(record: object, stage: str, key: str, directory: Path) -> str | None:
    """Why `record` (parsed entry.json) cannot be trusted for entry `directory`, or None.

    File contents are not checked here (the cache compares digests afterwards)."""
    problem = listed_files_problem(record, stage, key)
    if problem:
        return problem
    files = record["files"]
    for name in files:
        path = directory / name
        if path.is_symlink() or not path.is_file():
            return f"{name} is missing or not a regular file"
    outputs = record.get("outputs")
    if not isinstance(outputs, dict):
        return "'outputs' is not an object"
    for kind, value in outputs.items():
        if not isinstance(value, dict) or not isinstance(value.get("sha256"), str):
            return f"output {kind!r} is not an object with a sha256"
        if not isinstance(value.get("file"), str) or value["file"] not in files:
            return "an output is not among the recorded files"
    for field, types in _OPTIONAL_FIELDS.items():
        if field in record and not isinstance(record[field], types):
            return f"'{field}' has type {type(record[field]).__name__}"
    if record.get("console_file") is not None and record["console_file"] not in files:
        return "the console file is not among the recorded files"
    return None
