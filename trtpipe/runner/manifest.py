"""`manifest.json` in the run directory: what ran, from what, producing what.

Contract (DESIGN.md): `stages` is a list of {name, status, key, seconds, inputs,
outputs}; `outputs` maps an artifact kind to {path, sha256}. Paths are relative to
the run directory, so an archived run directory stays meaningful.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtpipe.cache.files import write_atomic
from trtpipe.cache.tools import environment_record

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1


@dataclass
class StageRecord:
    name: str
    status: str  # ran, cached, deferred, skipped, failed, interrupted
    key: str | None = None
    seconds: float = 0.0
    inputs: dict[str, str] = field(default_factory=dict)  # kind -> sha256
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> {path, sha256}
    summary: str = ""
    reason: str | None = None  # why it ran (or why it was skipped / failed)
    error: str | None = None
    # What the key is the hash of (stage, version, config, input digests, tool versions),
    # so that a later verification can name the value that drifted from the manifest alone.
    material: dict | None = None
    # Where the stage's artifacts (all in one cache entry) came from: "local" (the local cache had
    # the entry, or the stage ran here) or "remote" (downloaded from cache.remote in this run, and
    # checked); None when the stage has no entry (skipped, failed, interrupted).
    origin: str | None = None
    # cache.remote only: a remote hit's {"downloaded": bytes, "seconds"}, or an entry that ran's
    # {"upload": "uploaded" | "present" (another writer's record was first) | "failed"}.
    remote: dict | None = None


@dataclass
class RunManifest:
    config: dict
    overrides: list[str]
    source: dict
    stages: list[StageRecord] = field(default_factory=list)
    status: str = "running"
    exit_code: int | None = None  # the run's exit code (0, 1 or 2), once it ended
    # The absolute directory relative config paths (model, data, cache) were resolved
    # against, so `trtpipe-verify` resolves them the same way from any directory.
    start_dir: str | None = None
    # Run-directory paths of the models and engines kept only in the cache (cache/publish.py):
    # `run.artifacts=final`, or a run that failed.
    left_in_cache: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "format": MANIFEST_FORMAT,
            **environment_record(),
            "overrides": self.overrides,
            "config": self.config,
            "source": self.source,
            "start_dir": self.start_dir,
            "status": self.status,
            "exit_code": self.exit_code,
            "stages": [asdict(stage) for stage in self.stages],
            "left_in_cache": self.left_in_cache,
        }

    def write(self, run_dir: Path) -> dict:
        """Write manifest.json; returns the record written (the run summary reads it, not a second to_json)."""
        record = self.to_json()
        write_atomic(Path(run_dir) / MANIFEST_NAME, (json.dumps(record, indent=2) + "\n").encode())
        return record
