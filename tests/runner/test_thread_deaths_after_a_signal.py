"""After Ctrl-C, a background thread's death is logged, not printed (runner/interrupt.py
`_thread_deaths_after_a_signal_logged`): joblib's loky manager thread died with a KeyError
traceback under `trtpipe: interrupted` when Ctrl-C came while a sweep's workers started
(seen under load). Before any signal, a thread's death still shows: it would be a defect."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import os, signal, threading
from trtpipe.runner.interrupt import Interrupted, install_signal_handlers

def die(tag):
    raise KeyError(tag)

install_signal_handlers()
t = threading.Thread(target=die, args=("before-the-signal",), name="ExecutorManagerThread"); t.start(); t.join()
try:
    os.kill(os.getpid(), signal.SIGINT)
    signal.sigtimedwait([], 0)  # let the handler run
    for _ in range(1000):
        pass
except Interrupted:
    print("interrupted", flush=True)
t = threading.Thread(target=die, args=("after-the-signal",), name="ExecutorManagerThread"); t.start(); t.join()
"""


def test_a_thread_that_dies_after_ctrl_c_prints_no_traceback():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted"
    assert "before-the-signal" in done.stderr and "Traceback" in done.stderr  # a death before any signal shows
    assert "after-the-signal" not in done.stderr, done.stderr
