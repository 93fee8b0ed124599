"""Place each stage's cache entry files in the run directory: what is placed, and how.

Decisions (issue 33, item 1: disk in proportion to what changed):
- How. A file of at least `LINK_MIN_BYTES` is a reflink where the file system offers one,
  else a read-only hard link to the entry's (read-only) file, else a copy
  (`files.place_file`): a run directory and the cache hold each model's bytes once. Smaller
  files (plans, reports, scripts: what a user opens in an editor, which may save in place)
  are private copies, which cost nothing noticeable (issue 22, item 6). An ONNX model's
  external data file is always a reflink or a copy: onnx refuses to load a data file with
  more than one link ("a potential hardlink attack"), and the run directory's model must load.
- What. `run.artifacts=all` (the default) places every stage's files; `final` places the
  models and engines of the last stage that produced one and every stage's other files; a
  failed or interrupted run places no model or engine at all (they stay in the cache, under
  the keys its manifest records): its directory keeps the logs, reports, plans and manifest.
  The manifest records every output's path and sha256 either way; `trtpipe-verify` notes a
  file that is not in the run directory and compares its recorded digest.
- When. The small files are placed at once; the models and engines when the run's outcome is
  known (`finish`). Links are instant; copies (another file system) run on a worker thread
  (`copy_file_range` releases the GIL) while `finish` waits.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from trtpipe.cache.cache import CacheEntry
from trtpipe.cache.files import disk_errors_as_user_errors, place_file

ARTIFACT_CHOICES = ("all", "final")
# Below this a file is copied, not linked: a plan or report is small, and the user's to edit.
LINK_MIN_BYTES = 1 << 20
# Output kinds whose files (and a model's data file) are bulk: placed per `run.artifacts`.
BULK_KINDS = ("model", "engine")


class RunDirPublisher:
    def __init__(self, run_dir: Path, artifacts: str = "all") -> None:
        self.run_dir = run_dir
        self.artifacts = artifacts
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trtpipe-publish")
        self._pending: list[Future] = []
        self._bulk: list[tuple[str, CacheEntry, list[str]]] = []  # (stage, entry, file names), in run order

    def publish(self, entry: CacheEntry, stage_name: str) -> dict[str, dict[str, str]]:
        """Place the entry's small files in run_dir/<stage>/ and hold back its models and engines
        until `finish`; returns the outputs' manifest record."""
        bulk = bulk_files(entry.record)
        for name in entry.record["files"]:
            if name not in bulk:
                self._place(entry, stage_name, name)
        if bulk:
            self._bulk.append((stage_name, entry, sorted(bulk)))
        return {
            kind: {"path": f"{stage_name}/{value['file']}", "sha256": value["sha256"]}
            for kind, value in sorted(entry.record["outputs"].items())  # same order for ran and cached
        }

    def finish(self, succeeded: bool) -> list[str]:
        """Place the models and engines `run.artifacts` keeps (none when the run failed), then
        block until every file is placed; the first failure is raised (disk errors as `UserError`).
        Returns the run-directory paths of the models and engines left in the cache."""
        kept = self._kept_bulk(succeeded)
        left: list[str] = []
        for index, (stage_name, entry, names) in enumerate(self._bulk):
            for name in names:
                if index in kept:
                    self._place(entry, stage_name, name)
                else:
                    # A rerun into this directory: an earlier run's file at that name is not this
                    # run's (its manifest would not describe it); the name is removed, never written.
                    (self.run_dir / stage_name / name).unlink(missing_ok=True)
                    left.append(f"{stage_name}/{name}")
        self._bulk = []
        pending, self._pending = self._pending, []
        try:
            with disk_errors_as_user_errors(self.run_dir):
                for future in pending:
                    future.result()
        finally:
            self._pool.shutdown(wait=True)
        return left

    def _kept_bulk(self, succeeded: bool) -> set[int]:
        if not succeeded:
            return set()
        if self.artifacts == "final":
            return {len(self._bulk) - 1} if self._bulk else set()
        return set(range(len(self._bulk)))

    def _place(self, entry: CacheEntry, stage_name: str, name: str) -> None:
        source = entry.directory / name
        link = name not in data_files(entry.record) and source.stat().st_size >= LINK_MIN_BYTES
        self._pending.append(self._pool.submit(place_file, source, self.run_dir / stage_name / name, link))


def bulk_files(record: dict) -> set[str]:
    """The entry's model and engine files and the models' data files."""
    named = {value["file"] for kind, value in record["outputs"].items() if kind in BULK_KINDS}
    return named | {name for name in data_files(record) if name[: -len(".data")] in named}


def data_files(record: dict) -> set[str]:
    """The external data files of the entry's ONNX files: `<model>.onnx.data`, the one name
    trtpipe's `onnx_io.save_model` writes (read from the record, not the model: no parse)."""
    names = set(record["files"])
    return {f"{name}.data" for name in names if name.endswith(".onnx") and f"{name}.data" in names}
