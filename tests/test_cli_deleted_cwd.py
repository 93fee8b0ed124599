"""trtpipe started in a working directory that was deleted under its shell (issue 32, item 7).

Before: every path absolute, still a FileNotFoundError traceback from `Path.cwd()` (exit 1),
and the Python API raised the raw FileNotFoundError (from Hydra's `os.getcwd()`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.cli_helpers import run_trtpipe


def in_a_deleted_directory(gone):
    def enter_then_delete():
        os.chdir(gone)
        os.rmdir(gone)
    return enter_then_delete


def test_a_deleted_working_directory_is_one_line_exit_2(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    run = run_trtpipe(tmp_path, "stages=[sanitize]", f"hydra.run.dir={tmp_path / 'runs' / 'run'}",
                      cache=tmp_path / "cache", preexec_fn=in_a_deleted_directory(gone), timeout=120)
    assert run.code == 2, run.stderr
    assert "Traceback" not in run.stderr and "FileNotFoundError" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the current directory no longer exists" in lines[0] and "Fix: cd " in lines[0], lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_the_api_raises_a_user_error_in_a_deleted_directory(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = textwrap.dedent(f"""
        from trtpipe import api
        from trtpipe.errors import UserError
        for kwargs in ({{}}, {{"run_dir": {str(tmp_path / 'run')!r}, "start_dir": {str(tmp_path)!r}}}):
            try:
                api.run(["stages=[sanitize]"], **kwargs)
            except UserError as error:
                print("UserError:", error)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")},
                          preexec_fn=in_a_deleted_directory(gone))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("UserError: the current directory no longer exists")
                                   for line in lines), done.stdout + done.stderr
