"""The two kinds of failure trtpipe distinguishes, and their exit codes.

Decision: a user error (bad config, missing or corrupt input) is exit code 2 and
is reported in one line that names the problem and the fix; a stage or
validation failure is exit code 1. Keeping them as two exception types lets the
Python API raise them and the command line map them to exit codes in one place.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USER_ERROR = 2


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
        text = " ".join(self.problem.split())
        if self.fix:
            text += f". Fix: {' '.join(self.fix.split())}"
        return text + "."


class StageFailed(TrtpipeError):
    """A stage ran and failed (or validation rejected the result)."""

    exit_code = EXIT_FAILED


class TrtpipeGraphError(RuntimeError):
    """ONNX Runtime refused a graph trtpipe built from the model (an emulation, a search graph).

    Decision: not a `TrtpipeError`: the model ran (or was never at fault) and the user can do
    nothing about it, so it is a trtpipe defect (exit 1, traceback in trtpipe.log). Its own type
    and message keep the console from reading as if the user's model were invalid.
    """
