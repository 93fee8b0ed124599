"""The `fs` and `sweep` fuzz kinds (issue 22, "Done when"), a small fixed-seed run: each case a
real run of the real command with the file system around it mutated, or a real sweep with a
failing or killed job. Mutations, oracles: bench/fuzz/fuzz_scenarios.py and the modules it names.

OPEN_ON_MAIN lists the mutations whose defects main still has: their defects are reported,
not failed on; a new mutation that finds a defect not fixed yet goes here with its issue item
until its fix lands. Every other mutation is held to 0 defects.
"""

from __future__ import annotations

import pytest

from bench.fuzz import fuzz_runs as fr
from bench.fuzz import fuzz_scenarios as fs

pytestmark = pytest.mark.slow  # real subprocess runs, ~1 minute

# mutation -> the issue 22 item whose fix makes it pass (xfail-style: empty it as fixes merge).
OPEN_ON_MAIN: dict[str, str] = {}
# The causes of the last open one (`sweep_sigint`, item 14) each have a deterministic test in
# tests/runner/: Ctrl-C during a joblib worker's start or after the outcome was decided
# (test_signals_at_the_edges.py), an Interrupted raised inside a __del__ (test_unraisable_interrupt.py).

# One case per mutation of this sample (each issue item, and the controls), seed 0: ~50 s.
FS_SAMPLE = ("ext_plain", "ext_missing", "ext_past_end", "data_link_valid", "cache_tmp_link", "cache_entry_link",
             "ext_symlink_outside", "ext_fifo", "ext_negative_offset", "cache_lock_loop", "rundir_failed_rerun",
             "perms_private")
SWEEP_SAMPLE = ("sweep_user_error", "sweep_killed", "sweep_sigint")


def _unexpected(results) -> list[str]:
    found = [d for _, defects in results for d in defects]
    for defect in found:
        if defect.category in OPEN_ON_MAIN:
            print(f"open ({OPEN_ON_MAIN[defect.category]}): {defect}")
    return [str(d) for d in found if d.category not in OPEN_ON_MAIN]


def test_every_mutation_has_an_item_and_open_names_exist():
    names = set(fs.MUTATIONS["fs"]) | set(fs.MUTATIONS["sweep"])
    assert names == set(fs.ITEMS)
    assert set(OPEN_ON_MAIN) <= names


def test_the_oracles_can_fail(tmp_path):
    """A traceback, exit 1, two lines, a misleading 'missing', an outside change and a copied secret are defects."""
    assert fr.user_error(fr.Outcome(1, "", "Traceback (most recent call last):\n  x\nValueError: y", 1))
    assert fr.user_error(fr.Outcome(1, "", "trtpipe: internal error: OSError", 1))
    assert fr.user_error(fr.Outcome(2, "", "trtpipe: error: a\nsecond line", 1))
    (tmp_path / "w.bin").mkdir()
    assert fr.user_error(fr.Outcome(2, "", "trtpipe: error: w.bin is missing", 1), tmp_path / "w.bin")
    assert fr.user_error(fr.Outcome(None, "", "", 120))
    assert fr.user_error(fr.Outcome(2, "", "trtpipe: error: the file 'x' is a FIFO. Fix: re-export", 1)) is None
    before = fr.tree(tmp_path)
    (tmp_path / "new").write_text("x")
    assert fr.nothing_outside(before, fr.tree(tmp_path))
    (tmp_path / "copy").write_bytes(b"..secret..")
    assert fr.no_secret(b"secret", [tmp_path]) and fr.no_secret(b"other", [tmp_path]) is None


def test_fs_mutations_fixed_on_main_give_no_defect(tmp_path):
    results = fs.run_cases("fs", len(FS_SAMPLE), 0, tmp_path, only=FS_SAMPLE)
    assert sorted(c["mutation"] for c, _ in results) == sorted(FS_SAMPLE)
    assert not _unexpected(results)


def test_sweeps_with_a_failing_job(tmp_path):
    results = fs.run_cases("sweep", len(SWEEP_SAMPLE), 0, tmp_path, only=SWEEP_SAMPLE)
    assert not _unexpected(results)


def test_an_open_mutation_is_found_on_todays_code(tmp_path):
    """The fuzzer finds what it is for: with a hard-linked secret as external data, a defect is reported
    unless the fix (issue 22 item 1) is in; then the case passes and this line leaves OPEN_ON_MAIN."""
    results = fs.run_cases("fs", 1, 0, tmp_path, only=("ext_hardlink_outside",))
    defects = [d for _, found in results for d in found]
    assert bool(defects) == ("ext_hardlink_outside" in OPEN_ON_MAIN), [str(d) for d in defects]


def test_sample_data_replaced_mid_run_is_never_served_for_other_data(tmp_path):
    """data_swap: one case (~7 s) of the data file flapping under a run; the deterministic regression
    test of the fix is tests/runner/test_source_snapshot.py (this race hit 3 of 12 cases before it)."""
    results = fs.run_cases("fs", 1, 0, tmp_path, only=("data_swap",))
    assert [c["mutation"] for c, _ in results] == ["data_swap"]
    assert not _unexpected(results)


def test_a_run_under_a_memory_limit_ends_cleanly(tmp_path):
    """memory_limit: one case (a random `ulimit -v` of 60 MB-1.2 GB); the deterministic regression
    tests of the fixes are tests/runner/test_out_of_memory.py (2 of 20 cases failed before them)."""
    results = fs.run_cases("fs", 1, 0, tmp_path, only=("memory_limit",))
    assert [c["mutation"] for c, _ in results] == ["memory_limit"]
    assert not _unexpected(results)
