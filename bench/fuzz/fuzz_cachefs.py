"""Cache-layout mutations of the `fs` fuzz kind (issue 22 items 2, 9, 16): a warm cache whose
`entries/<stage>`, entries, locks, memo, index files or marker are replaced by links (to a
victim outside the cache, or loops), made unreadable, or used by another user; then a real run.

Oracles (bench/fuzz/fuzz_runs.py): the run works (exit 0) or refuses in one line (exit 2),
never exit 1 or a traceback; nothing outside the cache and run directories is written,
deleted or changed (the victims outside and the folders links point to above all); the cache
verifies afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bench.fuzz import fuzz_runs as fr
from bench.fuzz.fuzz_fs import Context

NOBODY = 65534  # the uid that owns 'another user's' files


def _warm(ctx: Context, stages: str = "[sanitize]") -> bool:
    outcome = ctx.run(f"stages={stages}", name="warm")
    ctx.check(fr.success(outcome))
    return outcome.code == 0


def _key(ctx: Context, stage: str = "sanitize") -> str:
    return json.loads((ctx.workdir / "runs" / "warm" / "manifest.json").read_text())["stages"][0]["key"] \
        if stage == "sanitize" else ""


def _victim(ctx: Context, name: str = "victim.txt") -> Path:
    path = ctx.outside / name
    path.write_bytes(b"a file outside the cache " + ctx.rng.randbytes(16))
    return path


def _rerun(ctx: Context, *, cold: bool) -> None:
    """The run after the mutation: cold (the entry removed, so it is rebuilt) or warm; then the oracles."""
    before = ctx.guarded()
    outcome = ctx.run("stages=[sanitize]", name="after")
    ctx.check(fr.clean_or_user_error(outcome), fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))


def _drop_entry(ctx: Context, key: str) -> None:
    entry = ctx.cache / "entries" / "sanitize" / key
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)


def cache_stage_link(ctx: Context) -> None:
    """entries/sanitize is a link to a folder outside; when warm it holds a folder named by the key."""
    if not _warm(ctx):
        return
    stage = ctx.cache / "entries" / "sanitize"
    elsewhere = ctx.outside / "entries-sanitize"
    shutil.move(stage, elsewhere)
    if ctx.rng.random() < 0.5:  # an outside folder that happens to carry a key's name, not an entry
        for entry in elsewhere.iterdir():
            (entry / "entry.json").write_text("{}")
    elif ctx.rng.random() < 0.5:
        shutil.rmtree(elsewhere)
        elsewhere.mkdir()
    stage.symlink_to(elsewhere)
    _rerun(ctx, cold=False)


def cache_entry_link(ctx: Context) -> None:
    """entries/sanitize/<key> is a link to a copy outside (genuine or damaged)."""
    if not _warm(ctx):
        return
    entry = ctx.cache / "entries" / "sanitize" / _key(ctx)
    elsewhere = ctx.outside / "entry"
    shutil.move(entry, elsewhere)
    if ctx.rng.random() < 0.5:
        (elsewhere / "entry.json").write_text("{}")
    entry.symlink_to(elsewhere)
    _rerun(ctx, cold=False)


def _linked_lock(ctx: Context, target_of) -> None:
    """The entry is gone (so the run takes the key's lock) and the lock file is a link to `target_of(lock)`."""
    if not _warm(ctx):
        return
    key = _key(ctx)
    _drop_entry(ctx, key)
    lock = ctx.cache / "locks" / f"{key}.lock"
    _replace(lock)
    lock.symlink_to(target_of(lock))
    _rerun(ctx, cold=True)


def cache_lock_link(ctx: Context) -> None:
    """The key's lock file is a link to a victim outside; the entry is gone, so the lock is taken."""
    _linked_lock(ctx, lambda lock: _victim(ctx))


def cache_lock_loop(ctx: Context) -> None:
    """The key's lock is a symlink loop: exit 2 naming it, not an internal error."""
    _linked_lock(ctx, lambda lock: lock.name)


def _memo_files(ctx: Context) -> list[Path]:
    return sorted(p for p in (ctx.cache / "index").glob("source-digests*") if p.is_file())


def cache_memo_link(ctx: Context) -> None:
    """The source-digest memo (or its lock) is a link to a victim outside; the model is touched so it is re-hashed."""
    if not _warm(ctx) or not _memo_files(ctx):
        return
    memo = ctx.rng.choice(_memo_files(ctx))
    _replace(memo)
    memo.symlink_to(_victim(ctx))
    os.utime(ctx.model.path)
    _rerun(ctx, cold=False)


def cache_memo_loop(ctx: Context) -> None:
    if not _warm(ctx) or not _memo_files(ctx):
        return
    memo = ctx.rng.choice(_memo_files(ctx))
    _replace(memo)
    memo.symlink_to(memo.name)
    os.utime(ctx.model.path)
    _rerun(ctx, cold=False)


def cache_index_link(ctx: Context) -> None:
    """A stage's miss index (or its lock) is a link to a victim outside; the entry is gone (a miss is recorded)."""
    if not _warm(ctx):
        return
    candidates = [ctx.cache / "index" / "sanitize.json", ctx.cache / "locks" / "index-sanitize.lock"]
    path = ctx.rng.choice([p for p in candidates if os.path.lexists(p)] or candidates)
    _drop_entry(ctx, _key(ctx))
    _replace(path)
    path.symlink_to(_victim(ctx))
    _rerun(ctx, cold=True)


def cache_tmp_link(ctx: Context) -> None:
    """tmp/ is a link to a folder outside holding a stale-looking temporary: never cleaned."""
    if not _warm(ctx):
        return
    tmp = ctx.cache / "tmp"
    shutil.rmtree(tmp)
    elsewhere = ctx.outside / "tmp"
    (elsewhere / "stale").mkdir(parents=True)
    (elsewhere / "stale" / "TRTPIPE_TMP").write_text("")
    tmp.symlink_to(elsewhere)
    _rerun(ctx, cold=False)


def _without_dac_override() -> None:
    """Drop root's power to ignore file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER)
    from the bounding set before exec: the command then meets the modes another user's files set,
    while still able to run the shared venv (another uid could not read /work)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP


def _owned_by_another_user(ctx: Context, path: Path) -> None:
    """Every file of `path` another user's (0644); the folders 0755, or shared (0777) at the top only."""
    top, inner = ctx.rng.choice([0o755, 0o777]), ctx.rng.choice([0o755, 0o755, 0o777])
    for dirpath, dirnames, filenames in os.walk(path):
        os.chmod(dirpath, top if dirpath == str(path) else inner)
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, NOBODY, NOBODY)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def _run_as_another(ctx: Context) -> None:
    if os.geteuid() != 0:
        return  # needs root (to hand the cache to another uid); the case is then a no-op
    before = ctx.guarded()
    outcome = ctx.run("stages=[sanitize]", name="other", preexec_fn=_without_dac_override)
    ctx.check(fr.clean_or_user_error(outcome), fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))
    line = " ".join(outcome.lines()).lower()
    if outcome.code == 2 and "not a trtpipe cache marker" in line:
        ctx.check(f"an unreadable marker is called not a marker: {line[:200]}")


def cache_other_user(ctx: Context) -> None:
    """A warm 0755 cache that belongs to another user: the run works or refuses in one line."""
    if _warm(ctx):
        if ctx.rng.random() < 0.5:
            _drop_entry(ctx, _key(ctx))
        _owned_by_another_user(ctx, ctx.cache)
        _run_as_another(ctx)


def cache_marker_private(ctx: Context) -> None:
    """The cache marker belongs to another user with mode 0600 (their umask 077)."""
    if _warm(ctx):
        marker = ctx.cache / "TRTPIPE_CACHE.json"
        marker.chmod(0o600)
        os.chown(marker, NOBODY, NOBODY)
        _run_as_another(ctx)


def _replace(path: Path) -> None:
    if os.path.lexists(path):
        path.unlink()
