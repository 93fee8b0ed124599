"""Test-wide isolation of trtpipe's default cache.

Decision: the default cache is the user's cache directory (cache/cache_home.py), so a
test run must never write into the real ~/.cache/trtpipe nor read a developer's warm
entries there. For the whole session TRTPIPE_CACHE points at a fresh temporary folder
(tests that pass their own cache still do), and XDG_CACHE_HOME at another, so a test
that unsets TRTPIPE_CACHE to exercise the default lands in a temporary folder too.
Tests that share this default share a cache as concurrent runs do (per-key locks); a
test that counts entries or needs a cold cache passes its own folder.
Matplotlib keeps its font cache under XDG_CACHE_HOME too: MPLCONFIGDIR keeps it where it
was, so the session does not rebuild it (seconds) in the temporary folder.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def isolated_default_cache(tmp_path_factory):
    saved = {name: os.environ.get(name) for name in ("TRTPIPE_CACHE", "XDG_CACHE_HOME", "MPLCONFIGDIR")}
    if not os.environ.get("MPLCONFIGDIR"):
        os.environ["MPLCONFIGDIR"] = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                                  "matplotlib")
    os.environ["TRTPIPE_CACHE"] = str(tmp_path_factory.mktemp("trtpipe-default-cache"))
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache-home"))
    yield os.environ["TRTPIPE_CACHE"]
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config, items):
    """The fast tier (`pytest -m "not slow"`) leaves out every test of a module that runs the
    real `trtpipe` command or another Python process (tests/cli_helpers.py, subprocess):
    those are the end-to-end tests, each paying an interpreter start and a whole run.
    Decision: marked by what the module does rather than by a list of names, so a new
    end-to-end test module joins the slow tier without anyone remembering to mark it."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and ("run_trtpipe" in vars(module) or "subprocess" in vars(module)):
            item.add_marker(pytest.mark.slow)
