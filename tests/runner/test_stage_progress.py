"""Progress on long stages (issue 33, item 7; runner/console.py `StageProgress`): on a terminal a
line under `running...` counts the seconds and is cleared before anything else prints; when stdout
is not a terminal nothing of it is written."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
import time

from trtpipe.runner.console import PipelineLines, StageProgress
from bench.disk.disk import write_chain

SPINNER_LINE = re.compile(r"\r    . (\w+) running, \d+ s\x1b\[K")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_counts_and_is_cleared_before_a_console_line(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(StageProgress, "enabled", True)
    monkeypatch.setattr(StageProgress, "AFTER_S", 0.1)
    monkeypatch.setattr(StageProgress, "EVERY_S", 0.1)
    StageProgress.start("sanitize")
    time.sleep(0.5)
    assert SPINNER_LINE.search(screen.getvalue()), screen.getvalue()
    record = logging.LogRecord("trtpipe", logging.INFO, __file__, 1, "a stage line", None, None)
    assert PipelineLines().filter(record)  # a console line clears the progress line first
    assert screen.getvalue().endswith("\r\x1b[K")
    StageProgress.stop()
    written = screen.getvalue()
    time.sleep(0.3)
    assert screen.getvalue() == written, "nothing is written after the stage ended"


def _strip_progress(text: str) -> str:
    return SPINNER_LINE.sub("", text).replace("\r\x1b[K", "").replace("\r\n", "\n")


def _run_in_a_terminal(args: list[str], cwd, env) -> str:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real command line with a terminal as stdout
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "trtpipe", *args], env)
    out = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out += data
    os.waitpid(pid, 0)
    return out.decode()


def test_a_terminal_gets_the_progress_and_a_pipe_gets_none_of_it(tmp_path):
    write_chain(tmp_path / "big.onnx", width=2048, layers=8)  # 134 MB: sanitize takes seconds
    args = ["model.path=big.onnx", "stages=[sanitize]", "sanitize.fold_constants=false"]
    env = {**os.environ}
    env.pop("TRTPIPE_DEBUG", None)
    piped = subprocess.run([sys.executable, "-m", "trtpipe", *args, f"hydra.run.dir={tmp_path / 'piped'}"], cwd=tmp_path,
                           env={**env, "TRTPIPE_CACHE": str(tmp_path / "c1")}, capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout and "\x1b" not in piped.stdout
    shown = _run_in_a_terminal([*args, f"hydra.run.dir={tmp_path / 'tty'}"], tmp_path,
                               {**env, "TRTPIPE_CACHE": str(tmp_path / "c2")})
    manifest = json.loads((tmp_path / "tty" / "manifest.json").read_text())
    seconds = {stage["name"]: stage["seconds"] for stage in manifest["stages"]}
    # A stage that ran past the first tick by a whole period shows its line (the unit test above
    # checks the line itself whatever the machine's speed).
    slow = {name for name, spent in seconds.items() if spent > StageProgress.AFTER_S + 2 * StageProgress.EVERY_S}
    assert set(SPINNER_LINE.findall(shown)) >= slow, (seconds, repr(shown))
    # Once the progress is taken out, the terminal shows the lines a pipe gets (paths aside).
    lines = [line.replace(str(tmp_path / "tty"), "RUN") for line in _strip_progress(shown).splitlines()]
    expected = [line.replace(str(tmp_path / "piped"), "RUN") for line in piped.stdout.splitlines()]
    strip_times = lambda text: re.sub(r"\d+\.\d+s", "Ns", text)  # noqa: E731
    assert [strip_times(line) for line in lines] == [strip_times(line) for line in expected], repr(shown)
