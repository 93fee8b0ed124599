"""Full-match a user's regex against many names within a time bound.

Decisions:
- Python's `re` has no timeout and holds the GIL while it backtracks, so a
  pattern such as `(a+)+$` against a long name that almost matches runs for
  hours with no way to stop it from a thread. The `regex` module's timeout is
  not a dependency, and rejecting "catastrophic" patterns structurally
  (nested quantifiers) is both incomplete and refuses harmless patterns.
  So the matching runs in a forked child (it inherits the compiled pattern and
  the names; nothing is pickled) that writes one byte per name to a pipe; the
  parent waits at most `MATCH_SECONDS` and otherwise kills the child and
  raises a UserError naming the rule and the pattern.
- `MATCH_SECONDS` = 5: a sane full-match regex takes well under 0.1 s over
  100,000 names; 5 s leaves room for a loaded machine, and a backtracking
  blow-up exceeds any bound anyway (exponential in the name's length).
- Where `os.fork` does not exist (Windows), the names are matched in process
  without a bound: trtpipe's supported platform is Linux.
"""

from __future__ import annotations

import os
import re
import select
import signal
import time
import warnings
from collections.abc import Sequence

from trtpipe.errors import UserError

MATCH_SECONDS = 5.0


def fullmatches(regex: re.Pattern, names: Sequence[str], what: str, timeout: float = MATCH_SECONDS) -> list[str]:
    """The names `regex` fully matches, in order; UserError naming `what` when it takes over `timeout` s."""
    names = list(names)
    if not names:
        return []
    if not hasattr(os, "fork"):
        return [name for name in names if regex.fullmatch(name)]
    flags = _flags_in_child(regex, names, what, timeout)
    return [name for name, flag in zip(names, flags) if flag == 1]


def _flags_in_child(regex: re.Pattern, names: list[str], what: str, timeout: float) -> bytes:
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns about fork in a threaded process: the child runs no locks
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: match, write, exit without running any cleanup of the parent's
        try:
            os.close(read_end)
            flags = bytes(1 if regex.fullmatch(name) else 0 for name in names)
            view = memoryview(flags)
            while view:
                view = view[os.write(write_end, view):]
        finally:
            os._exit(0)
    os.close(write_end)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while len(received) < len(names):
            left = deadline - time.monotonic()
            ready = select.select([read_end], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise UserError(
                    f"{what}: regex {regex.pattern!r} did not finish matching {len(names)} names within {timeout:g} s "
                    "(catastrophic backtracking, e.g. nested quantifiers such as '(a+)+')",
                    "rewrite the pattern without nested or overlapping quantifiers (e.g. '(a+)+$' -> 'a+'), "
                    "or use match: exact or op_type",
                )
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            received += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if len(received) != len(names):
        raise RuntimeError(f"the regex worker for {what} ended after {len(received)} of {len(names)} names")
    return bytes(received)
