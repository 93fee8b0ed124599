"""A Ctrl-C that comes where an exception cannot be raised safely still ends the run 130 in one
line (issue 22 item 14's class, found by the sweep fuzz run): where Python cannot propagate it (a
`__del__`, a weakref callback: seen in `WeakValueDictionary`'s removal callback), and inside a
native extension's initialisation (onnx's, in a worker importing it for its first job). Real
signals, in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import gc, os, signal, sys
import trtpipe.graph.sanitize as sanitize
from trtpipe.cli import main

class CtrlCWhenCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside __del__

original = sanitize.make_node_names_unique

def collects_mid_stage(model):
    CtrlCWhenCollected()  # collected at once: its __del__ gets the Ctrl-C
    for _ in range(1000):  # the stage goes on a little, as real passes do
        sum(range(100))
    return original(model)

sanitize.make_node_names_unique = collects_mid_stage
sys.argv = ["trtpipe", *sys.argv[1:]]
main()
"""


def test_an_interrupt_raised_inside_del_still_ends_the_run_130_in_one_line(tmp_path: Path):
    """Reproduced: 'Exception ignored in: <function CtrlCWhenCollected.__del__>' and a traceback on
    stderr (the Interrupted dropped; the stage check then still caught the signal)."""
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", SCRIPT, "stages=[sanitize]", f"hydra.run.dir={run_dir}"],
                          cwd=tmp_path, env={**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == ["trtpipe: interrupted in stage sanitize"], done.stderr


EXTENSION_INIT = """
import os, signal, sys
import numpy
from trtpipe.runner.interrupt import install_signal_handlers
install_signal_handlers()
sent = []

def ctrl_c_inside_onnx_init(frame, event, arg):  # onnx's C++ extension creates its enums in its init
    if event == "call" and not sent and frame.f_code.co_name == "_create_" and frame.f_code.co_filename.endswith("enum.py"):
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)

sys.setprofile(ctrl_c_inside_onnx_init)
try:
    import onnx
except KeyboardInterrupt as error:
    sys.setprofile(None)
    print(f"raised after the extension's init: {type(error).__name__}", file=sys.stderr)
    sys.exit(130)
sys.setprofile(None)
print(f"not interrupted; signal sent: {bool(sent)}", file=sys.stderr)
"""


def test_a_ctrl_c_inside_a_native_extensions_init_is_raised_after_it():
    """Reproduced: the handler's exception inside onnx's nanobind init aborted the process
    (exit -6: "terminate called after throwing an instance of 'nanobind::python_error'")."""
    done = subprocess.run([sys.executable, "-c", EXTENSION_INIT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "raised after the extension's init: Interrupted", done.stderr


AFTER_IMPORTS = """
import importlib.util, os, signal, sys, time
from trtpipe.runner.interrupt import install_signal_handlers
install_signal_handlers()
import decimal  # its extension calls itself "decimal", its spec "_decimal"
if sys.argv[1] == "created_never_executed":  # a module created by hand, never executed
    spec = importlib.util.find_spec("_lzma")
    module = importlib.util.module_from_spec(spec)
started = time.monotonic()
try:
    os.kill(os.getpid(), signal.SIGINT)
    while time.monotonic() - started < 10:
        sum(range(1000))
except KeyboardInterrupt:
    print(f"raised after {time.monotonic() - started:.1f} s", file=sys.stderr)
    sys.exit(130)
print("never raised", file=sys.stderr)
"""


@pytest.mark.parametrize("case, within", [("imports_done", 0.5), ("created_never_executed", 4.0)])
def test_a_ctrl_c_after_extension_imports_is_raised_at_once(case, within):
    """Reproduced (the sweep fuzz run, after the hold above first landed): the hold was keyed by
    module name, `_decimal`'s module calls itself "decimal", so its entry was never removed and every
    later Ctrl-C was held for good: a sweep went on launching jobs after it. A module created and
    never executed (no loader does this, a caller of importlib might) holds a signal for at most
    AWAIT_EXEC_SECONDS (2 s), then it is delivered."""
    done = subprocess.run([sys.executable, "-c", AFTER_IMPORTS, case], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    seconds = float(done.stderr.split()[2])
    assert seconds < within, done.stderr
