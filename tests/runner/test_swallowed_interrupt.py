"""A Ctrl-C that a library swallows still ends the stage unpublished.

Found by a sweep test (issue 22 work): SIGINT arriving while a C extension was importing came
back as `ImportError: initialization failed`; sanitize's undoable pass runner took it for the
pass's own failure, undid the pass, finished the stage, and the cache served that result to
every later run. The script below makes the same thing happen every time: the first graph pass
of sanitize receives the signal and turns the exception into an ImportError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli_helpers import cache_entries

SCRIPT = """
import os, signal, sys
import trtpipe.graph.sanitize as sanitize
from trtpipe.cli import main

def swallowed_ctrl_c(model):
    try:
        os.kill(os.getpid(), signal.SIGINT)  # the command line's handler raises Interrupted here
    except KeyboardInterrupt as error:
        raise ImportError("initialization failed") from error  # what a C extension's import turns it into
    return []

sanitize.make_node_names_unique = swallowed_ctrl_c
sys.argv = ["trtpipe", *sys.argv[1:]]
main()
"""


def test_a_swallowed_interrupt_is_not_published(tmp_path: Path):
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    env = {**os.environ, "TRTPIPE_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, "stages=[sanitize]", f"hydra.run.dir={run_dir}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted in stage sanitize" in done.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert cache_entries(cache) == []  # nothing a later run could be served
