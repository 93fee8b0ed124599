"""Run cases in worker processes, each case under a time limit.

Decisions:
- Long-lived workers (spawned, so each starts clean) take one case at a time
  over a pipe: importing onnx, ONNX Runtime and Polygraphy costs about a
  second, far more than most cases, so a process per case would dominate.
- The parent holds every deadline. A worker past its case's deadline is
  killed (SIGKILL, it may be stuck in native code) and replaced; the case is
  a `hang` defect. A worker that dies on its own (segfault, abort, out of
  memory) makes its case a `crash` defect. Either way the run goes on.
- Workers write into one scratch directory the parent owns and removes, so a
  killed worker leaves nothing behind. Their stdout/stderr go to /dev/null:
  native libraries print warnings there that would bury the summary.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait

from bench.corpus.corpus_case import classify
from bench.corpus.corpus_data import CaseRef


def _worker_main(conn, work_root: str) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(classify(case, work_root))


class _Worker:
    def __init__(self, context, work_root: str) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, work_root), daemon=True)
        self.process.start()
        child.close()
        self.case: CaseRef | None = None
        self.deadline = 0.0

    def give(self, case: CaseRef, timeout: float) -> None:
        self.case, self.deadline = case, time.monotonic() + timeout
        self.conn.send(case)

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


def run_cases(cases: list[CaseRef], *, workers: int, timeout: float, on_result=None) -> list[dict]:
    """Classify every case; `on_result(record, done, total)` is called as results arrive."""
    context = multiprocessing.get_context("spawn")
    work_root = tempfile.mkdtemp(prefix="trtpipe_corpus_")
    pending, results = deque(cases), []
    pool = [_Worker(context, work_root) for _ in range(max(1, min(workers, len(cases))))]

    def finish(worker: _Worker, record: dict) -> None:
        worker.case = None
        results.append(record)
        if on_result:
            on_result(record, len(results), len(cases))

    try:
        while pending or any(w.case for w in pool):
            for worker in pool:
                if worker.case is None and pending:
                    worker.give(pending.popleft(), timeout)
            busy = [w for w in pool if w.case is not None]
            wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for index, worker in enumerate(pool):
                if worker.case is None:
                    continue
                if worker.conn.poll():
                    try:
                        finish(worker, worker.conn.recv())
                        continue
                    except EOFError:
                        record = _failure(worker.case, "crash", f"worker died (exit code {_exit_code(worker)})")
                elif not worker.process.is_alive():
                    record = _failure(worker.case, "crash", f"worker died (exit code {_exit_code(worker)})")
                elif time.monotonic() >= worker.deadline:
                    record = _failure(worker.case, "hang", f"no result after {timeout:g} s")
                else:
                    continue
                worker.kill()
                pool[index] = _Worker(context, work_root)
                finish(worker, record)
    finally:
        for worker in pool:
            if worker.process.is_alive():
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
                worker.process.join(timeout=5)
                if worker.process.is_alive():
                    worker.kill()
        shutil.rmtree(work_root, ignore_errors=True)
    return results


def _exit_code(worker: _Worker):
    worker.process.join(timeout=1)
    return worker.process.exitcode


def _failure(case: CaseRef, category: str, message: str) -> dict:
    return {"name": case.name, "kind": case.kind, "outcome": "defect", "category": category,
            "stage": "any", "message": message, "seconds": None}
