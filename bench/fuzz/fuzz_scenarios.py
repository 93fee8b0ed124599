"""The scenario kinds of `python -m bench.fuzz`: `fs` (the file system around a run) and
`sweep` (multiruns with failing, killed and interrupted jobs), issue 22's "Done when".

Unlike the Hypothesis kinds, a scenario case is a real run (or several) of the real command,
seconds each, so cases are enumerated: case i of seed s is mutation (i + s) mod the list,
its details drawn from `random.Random(f"{s}:{i}")`. Every mutation is covered once per round
of len(MUTATIONS) cases, a run is reproducible from `--seed`, and `--mutation` picks some.
Each mutation names the issue items whose defect it would find (ITEMS).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from bench.fuzz import fuzz_cachefs as fc
from bench.fuzz import fuzz_fs as ff
from bench.fuzz import fuzz_limits as fl
from bench.fuzz import fuzz_models as fm
from bench.fuzz import fuzz_sweep as fsw
from bench.fuzz.fuzz_runs import Defect

FS = {f.__name__: f for f in (
    ff.ext_plain, ff.ext_symlink_outside, ff.ext_hardlink_outside, ff.ext_symlink_inside, ff.ext_hardlink_inside,
    ff.ext_folder_link, ff.ext_fifo, ff.ext_dev_zero, ff.ext_device, ff.ext_directory, ff.ext_missing,
    ff.ext_negative_offset, ff.ext_negative_length, ff.ext_short_length, ff.ext_past_end, ff.ext_not_a_number,
    ff.ext_location_model, ff.ext_empty_location,
    ff.data_directory, ff.data_fifo, ff.data_dev_zero, ff.data_link_valid, ff.data_nonfinite,
    ff.rundir_edit, ff.rundir_failed_rerun, ff.perms_private, ff.model_swap, ff.data_swap, fl.memory_limit,
    fc.cache_stage_link, fc.cache_entry_link, fc.cache_lock_link, fc.cache_lock_loop, fc.cache_memo_link,
    fc.cache_memo_loop, fc.cache_index_link, fc.cache_tmp_link, fc.cache_other_user, fc.cache_marker_private)}
SWEEP = ("sweep_user_error", "sweep_basic_user_error", "sweep_failed", "sweep_killed", "sweep_sigint",
         "sweep_relative_cache")
MUTATIONS = {"fs": tuple(FS), "sweep": SWEEP}

# The issue 22 items whose defect each mutation would find ("control": must keep working).
ITEMS = {
    "ext_plain": "control", "ext_symlink_outside": "1", "ext_hardlink_outside": "1", "ext_symlink_inside": "1",
    "ext_hardlink_inside": "1", "ext_folder_link": "1", "ext_fifo": "1, 16", "ext_dev_zero": "1, 16",
    "ext_device": "1, 16", "ext_directory": "1, 16", "ext_missing": "control", "ext_negative_offset": "10",
    "ext_negative_length": "10", "ext_short_length": "10", "ext_past_end": "10", "ext_not_a_number": "10",
    "ext_location_model": "10", "ext_empty_location": "10, 16", "data_directory": "16", "data_fifo": "16",
    "data_dev_zero": "16", "data_link_valid": "control", "data_nonfinite": "5", "rundir_edit": "6", "rundir_failed_rerun": "7",
    "perms_private": "8", "model_swap": "3", "data_swap": "3 (the sample data)", "memory_limit": "11", "cache_stage_link": "2", "cache_entry_link": "2",
    "cache_lock_link": "2, 9", "cache_lock_loop": "9", "cache_memo_link": "2, 9", "cache_memo_loop": "9",
    "cache_index_link": "2, 9", "cache_tmp_link": "2", "cache_other_user": "9", "cache_marker_private": "9, 16",
    "sweep_user_error": "4", "sweep_basic_user_error": "4", "sweep_failed": "4", "sweep_killed": "12",
    "sweep_sigint": "14", "sweep_relative_cache": "15",
}


def cases(kind: str, count: int, seed: int, only: tuple[str, ...] = ()) -> list[dict]:
    names = [m for m in MUTATIONS[kind] if not only or m in only]
    if not names:
        return []  # --mutation names only mutations of the other kind
    return [{"kind": kind, "mutation": names[(i + seed) % len(names)], "seed": f"{seed}:{i}"} for i in range(count)]


def check(case: dict, workdir: Path) -> list[Defect]:
    """Run one case in `workdir`; its defects (empty when every oracle holds)."""
    name = case["mutation"]
    try:
        if case["kind"] == "sweep":
            problems = fsw.check_sweep(case, workdir)
        else:
            ctx = ff.Context(workdir, random.Random(f"{name}:{case['seed']}"))
            if name != "model_swap":
                ctx.model = fm.build(workdir / "model", ctx.rng)
            FS[name](ctx)
            problems = ctx.problems
    except Exception as error:  # noqa: BLE001 - a case that cannot even be judged is reported, never raised
        problems = [f"the case itself failed: {type(error).__name__}: {str(error)[:200]}"]
    return [Defect(name, p) for p in problems]


def run_cases(kind: str, count: int, seed: int, root: Path, only: tuple[str, ...] = (), progress=None) -> list:
    """(case, defects) for each case, each in a fresh folder under `root` (removed afterwards)."""
    results = []
    for case in cases(kind, count, seed, only):
        workdir = Path(tempfile.mkdtemp(dir=root))
        try:
            results.append((case, check(case, workdir)))
        finally:
            _remove(workdir)
        if progress:
            progress(*results[-1])
    return results


def _remove(path: Path) -> None:
    """Remove a case folder (modes set by the case, links to /dev and FIFOs included; links are not followed)."""
    for dirpath, _, _ in os.walk(path):  # os.walk does not follow links
        try:
            os.chmod(dirpath, 0o755)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)
