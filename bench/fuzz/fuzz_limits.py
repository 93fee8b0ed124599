"""The `memory_limit` mutation of the `fs` fuzz kind: a real run under an address-space limit
(`ulimit -v`, RLIMIT_AS) drawn between 60 MB and 1.2 GB, so that memory runs out at a random
point: importing a library, a graph pass, ONNX Runtime's session or its threads, NumPy, the
cache's publish (issue 22, item 11: "ONNX Runtime running out of memory in validate").

Oracles: the run ends 0, or exit 2 with one stderr line that says memory ran out (never a
traceback, never "internal error", never a plan or fold silently changed: a cached entry of a
limited run must equal an unlimited run's); nothing outside the cache and run directory
changes; the cache verifies.

Decision: two endings belong to OpenBLAS (NumPy's BLAS), not to trtpipe, and are counted as
`dependency` outcomes rather than defects: when it cannot start its threads it raises SIGINT on
itself (OpenBLAS driver/others/blas_server.c, after printing "blas_thread_init: pthread_create
failed"), which any program reports as an interrupt (exit 130); when an allocation keeps failing
it prints "OpenBLAS error: Memory allocation still failed" and calls exit(1).
"""

from __future__ import annotations

import resource

from bench.fuzz import fuzz_runs as fr

OPENBLAS_ENDINGS = ((130, "blas_thread_init"), (1, "OpenBLAS error: Memory allocation still failed"))


def _limited(megabytes: int):
    def apply() -> None:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def memory_limit(ctx) -> None:
    megabytes = ctx.rng.choice([60, 100, 150, 200, 250, 300, 400, 600, 900, 1200]) + ctx.rng.randrange(50)
    stages = ctx.rng.choice(["[sanitize]", "[sanitize,upgrade_opset,precision]",
                             "[sanitize,upgrade_opset,precision,validate]", "[sanitize,validate]"])
    data = "+data.inputs.x={low:0,high:1,dtype:float32}"
    before = ctx.guarded()
    outcome = fr.run_cli(ctx.workdir, [f"model.path={ctx.model.path}", f"hydra.run.dir={ctx.run_dir()}",
                                       f"stages={stages}", data], ctx.cache, preexec_fn=_limited(megabytes))
    ctx.check(fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))
    if any(outcome.code == code and text in outcome.stderr for code, text in OPENBLAS_ENDINGS):
        return  # OpenBLAS's own ending (module docstring)
    if outcome.code != 0:
        problem = fr.user_error(outcome)
        if problem is None and "memory" not in outcome.lines()[0].lower():
            problem = f"exit 2 under a {megabytes} MB limit without saying memory ran out: {outcome.lines()[0][:200]}"
        ctx.check(problem and f"under a {megabytes} MB limit: {problem}")
        return
    # It passed under the limit: what it cached must be what an unlimited run computes.
    truth = fr.run_cli(ctx.workdir, [f"model.path={ctx.model.path}", f"hydra.run.dir={ctx.run_dir('truth')}",
                                     f"stages={stages}", data], ctx.workdir / "fresh-cache")
    ctx.check(fr.success(truth))
    for stage in ("sanitize", "precision"):
        mine, theirs = (ctx.run_dir(name) / stage / "model.onnx" for name in ("run", "truth"))
        if mine.is_file() and theirs.is_file() and mine.read_bytes() != theirs.read_bytes():
            ctx.check(f"{stage} under a {megabytes} MB limit cached another model than an unlimited run")
