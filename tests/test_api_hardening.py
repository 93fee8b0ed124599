"""The Python API under a real caller: threads, the caller's logging, Hydra-only overrides
(issue 13, item 10)."""

from __future__ import annotations

import logging
import re
import threading
from datetime import datetime
from pathlib import Path

import pytest

import trtpipe.api as api

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _times(log_file: Path) -> list[datetime]:
    return [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            for m in map(STAMP.match, log_file.read_text().splitlines()) if m]


def test_two_threads_both_run_one_after_the_other(tmp_path):
    """Reproduced: two threads calling run at once shared Hydra's global state (the second
    compose failed with 'GlobalHydra is already initialized', or both composed into one)
    and the `trtpipe` logger, so each run's trtpipe.log held the other run's lines."""
    results, errors = {}, []

    def one(name: str) -> None:
        try:
            results[name] = api.run(["+recipe=fp32", f"cache.dir={tmp_path / 'cache'}"],
                                    run_dir=tmp_path / name, start_dir=tmp_path)
        except Exception as error:  # noqa: BLE001 - the test reports any failure of either thread
            errors.append(f"{name}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=one, args=(name,)) for name in ("first", "second", "third")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert sorted(results) == ["first", "second", "third"] and all(r.ok for r in results.values())
    spans = []
    for name, result in results.items():
        text = (result.run_dir / "trtpipe.log").read_text()
        others = [other for other in results if other != name]
        assert str(result.run_dir) in text and not any(str(tmp_path / o) + "\n" in text for o in others), name
        times = _times(result.run_dir / "trtpipe.log")
        spans.append((times[0], times[-1]))
    spans.sort()
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), "the runs overlapped"


@pytest.fixture
def caller_logging():
    """A caller that configured logging its own way (WARNING, one collecting handler)."""
    root, package = logging.getLogger(), logging.getLogger("trtpipe")
    saved = (root.level, list(root.handlers), package.level, list(package.handlers), package.propagate)
    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record)

    collect = Collect()
    root.setLevel(logging.WARNING)
    root.addHandler(collect)
    yield seen
    root.removeHandler(collect)
    root.setLevel(saved[0])


def test_the_run_log_has_debug_lines_and_the_callers_logging_is_untouched(tmp_path, caller_logging):
    """Reproduced: the run's trtpipe.log stayed empty of INFO/DEBUG lines (the `trtpipe`
    logger inherited the caller's WARNING level)."""
    root, package = logging.getLogger(), logging.getLogger("trtpipe")
    before = (root.level, list(root.handlers), package.level, list(package.handlers), package.propagate)
    result = api.run(["+recipe=fp32", f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "run",
                     start_dir=tmp_path)
    assert result.ok
    assert (root.level, list(root.handlers), package.level, list(package.handlers), package.propagate) == before
    text = (result.run_dir / "trtpipe.log").read_text()
    assert "][DEBUG] " in text and "][INFO] " in text
    assert caller_logging == [] or min(r.levelno for r in caller_logging) >= logging.WARNING
    package.warning("after the run: still reaches the caller")
    assert caller_logging[-1].getMessage() == "after the run: still reaches the caller"
    assert "after the run" not in (result.run_dir / "trtpipe.log").read_text()


def test_a_caller_at_info_sees_the_runs_info_lines_but_no_debug(tmp_path, caller_logging):
    """The run's own DEBUG level must neither flood the caller nor hide what the caller's
    level lets through: the caller gets exactly the file's INFO-and-above records."""
    logging.getLogger().setLevel(logging.INFO)
    result = api.run(["+recipe=fp32", f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "run",
                     start_dir=tmp_path)
    assert result.ok
    lines = (result.run_dir / "trtpipe.log").read_text().splitlines()
    at_info = [line for line in lines if re.match(r"^\[[^]]+\]\[trtpipe[^]]*\]\[(INFO|WARNING|ERROR)\] ", line)]
    received = [r for r in caller_logging if r.name.startswith("trtpipe")]
    assert at_info and len(received) == len(at_info)
    assert all(r.levelno >= logging.INFO for r in received)


@pytest.mark.parametrize("override", ["hydra.run.dir=elsewhere", "hydra.run.dir=/tmp/x", "++hydra.run.dir=x",
                                      "hydra.job.chdir=true", "hydra/job_logging=disabled"])
def test_hydra_overrides_are_refused_with_the_api_argument(tmp_path, override):
    """Reproduced: `hydra.run.dir=...` was composed and silently ignored (the run went to
    outputs/<date>/<time>)."""
    with pytest.raises(api.UserError) as refused:
        api.run(["+recipe=fp32", override], start_dir=tmp_path)
    message = str(refused.value)
    assert override.lstrip("+").split("=")[0] in message and "\n" not in message
    if "run.dir" in override:
        assert "run_dir=" in message
    assert not (tmp_path / "outputs").exists()
