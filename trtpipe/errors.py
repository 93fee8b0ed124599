"""The two kinds of failure trtpipe distinguishes, and their exit codes.

Decision: a user error (bad config, missing or corrupt input) is exit code 2 and
is reported in one line that names the problem and the fix; a stage or
validation failure is exit code 1. Keeping them as two exception types lets the
Python API raise them and the command line map them to exit codes in one place.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys

from trtpipe.safe_text import safe_text

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141, as `cat` in a pipe would end by the signal


def exit_reader_gone():  # never returns (typing.NoReturn, not imported: a front-door cost of 19 ms)
    """Decision: when stdout's reader is gone (`trtpipe --help | head`), exit 141 with nothing on
    stderr and no traceback; stdout points at /dev/null so the interpreter's final flush does not
    fail a second time. One ending for every command (trtpipe, trtpipe-cache, trtpipe-inspect)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_READER_GONE)


class TrtpipeError(Exception):
    """Base of every error trtpipe raises on purpose."""

    exit_code = EXIT_FAILED


class UserError(TrtpipeError):
    """The input or the configuration is wrong; the user can fix it.

    `problem` says what is wrong, `fix` says what to do about it. Both are one
    sentence each so that `str(error)` fits on one line.
    """

    exit_code = EXIT_USER_ERROR

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem.rstrip(".")
        self.fix = fix.rstrip(".")
        super().__init__(self.one_line())

    def one_line(self) -> str:
        # Names in the problem (a model's, a file's) never reach the console raw (safe_text.py).
        text = " ".join(self.problem.split())
        if self.fix:
            text += f". Fix: {' '.join(self.fix.split())}"
        return safe_text(text + ".")


class StageFailed(TrtpipeError):
    """A stage ran and failed (or validation rejected the result)."""

    exit_code = EXIT_FAILED


class TrtpipeGraphError(RuntimeError):
    """ONNX Runtime refused a graph trtpipe built from the model (an emulation, a search graph).

    Decision: not a `TrtpipeError`: the model ran (or was never at fault) and the user can do
    nothing about it, so it is a trtpipe defect (exit 1, traceback in trtpipe.log). Its own type
    and message keep the console from reading as if the user's model were invalid.
    """


# What the machine says when memory runs out, in the exception types and texts trtpipe meets:
# MemoryError (NumPy, protobuf), ENOMEM, a shared library that cannot be mapped at import
# ("failed to map segment from shared object"), ONNX Runtime's allocation and thread-start
# failures ("Failed to allocate memory", std::bad_alloc, "pthread_create failed ... Cannot
# allocate memory"). Measured under `ulimit -v` (bench/fuzz `memory_limit`).
_OUT_OF_MEMORY_TEXT = re.compile(
    r"Failed to allocate memory|bad_alloc|[Oo]ut of memory|Cannot allocate memory|failed to map segment")


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENOMEM:
        return True
    return bool(_OUT_OF_MEMORY_TEXT.search(str(error)))


class OutOfMemory(UserError):
    """The machine's (or the process's) memory ran out.

    Decision: the machine's limit is neither the model's defect nor trtpipe's: exit 2 with one
    line and the fix, wherever it happens (a stage, an import, a graph pass). A pass that runs
    out of memory is never silently undone: its output would differ from what the same key
    gives on a machine with more memory."""

    def __init__(self, doing: str, error: BaseException) -> None:
        # The line that says it (NumPy's ImportError puts it under a page of advice), cut short.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        said = [line for line in lines if _OUT_OF_MEMORY_TEXT.search(line)]
        reason = " ".join((said or lines or [type(error).__name__])[0].split())[:300]
        super().__init__(
            f"out of memory while {doing} ({type(error).__name__}: {reason})",
            "free memory or raise this process's memory limit (ulimit -v), or use fewer or smaller sample "
            "inputs: data.iterations=1, smaller dynamic sizes in data.inputs.<input>.shape")


def pip_install_extra(extra: str) -> str:
    """The Fix that installs one of trtpipe's extras (pyproject.toml): `pip install` of the extra's own
    requirements, as trtpipe's installed metadata lists them.

    Decision: not `pip install 'trtpipe[EXTRA]'`: trtpipe is installed from its checkout and is not on
    the package index, so that command would look for trtpipe there (and could find another project
    of that name). The requirements themselves install from the index wherever trtpipe runs, with the
    extra's pins. Without metadata (a bare checkout on PYTHONPATH), the checkout's own command."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        listed = requires("trtpipe") or []
    except PackageNotFoundError:
        listed = []
    marker = re.compile(r"""extra\s*==\s*["']%s["']""" % re.escape(extra))
    picked = [requirement.split(";")[0].strip() for requirement in listed if marker.search(requirement)]
    if not picked:
        return f"pip install '.[{extra}]' (in trtpipe's checkout)"
    return "pip install " + " ".join(f"'{requirement}'" for requirement in picked)
