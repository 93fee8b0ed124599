"""Copy each stage's cache entry into the run directory, in the background.

Decision: the run directory gets its own copies of the cached files (see
`files.copy_file`), but no later stage reads them: stages read the cache
entries. So the copies run on a worker thread while the next stage computes
(`copy_file_range` releases the GIL), and the pipeline waits for them before it
writes the manifest. On a 2.7 GB model this takes 2-3 s of data-file copies
off the wall time. A copy that fails is raised by `wait`, once, at the end.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from trtpipe.cache.cache import CacheEntry
from trtpipe.cache.files import copy_file, disk_errors_as_user_errors


class RunDirPublisher:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trtpipe-publish")
        self._pending: list[Future] = []

    def publish(self, entry: CacheEntry, stage_name: str) -> dict[str, dict[str, str]]:
        """Start copying every file of the entry into run_dir/<stage>/; returns the outputs' manifest record."""
        stage_dir = self.run_dir / stage_name
        for name in entry.record["files"]:
            self._pending.append(self._pool.submit(copy_file, entry.directory / name, stage_dir / name))
        return {
            kind: {"path": f"{stage_name}/{value['file']}", "sha256": value["sha256"]}
            for kind, value in sorted(entry.record["outputs"].items())  # same order for ran and cached
        }

    def wait(self) -> None:
        """Block until every copy is done; the first failure is raised (disk errors as `UserError`)."""
        pending, self._pending = self._pending, []
        try:
            with disk_errors_as_user_errors(self.run_dir):
                for future in pending:
                    future.result()
        finally:
            self._pool.shutdown(wait=True)
