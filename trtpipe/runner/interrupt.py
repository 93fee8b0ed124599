"""Ctrl-C (SIGINT) and SIGTERM end a run cleanly: one line, a manifest, exit 130 or 143.

Decisions:
- A signal is an exception (`Interrupted`, a KeyboardInterrupt so an API caller's
  `except KeyboardInterrupt` still catches it) raised in the main thread wherever it
  is. The pipeline catches it around each stage, records the running stage as
  `interrupted` and the rest as `skipped`, writes the manifest with status
  `interrupted`, and raises `Interrupted` naming the stage; the command line prints
  `trtpipe: interrupted in stage X` and exits 128 + the signal number (shell
  convention: 130 for SIGINT, 143 for SIGTERM). No traceback.
- The cache stays intact because an entry is published by one rename of a complete
  temporary; the temporary of the interrupted stage is removed by the cache's
  `finally` (or, after SIGKILL, by the stale-temporary cleanup). The rerun hits the
  cache for every stage that finished.
- Only the command line installs handlers (SIGINT and SIGTERM, `install_signal_handlers`);
  the API (a library) leaves signal handling to its caller and sees Ctrl-C as the usual
  KeyboardInterrupt.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int = signal.SIGINT, stage: str | None = None) -> None:
        super().__init__(signum, stage)
        self.signum = int(signum)
        self.stage = stage

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def one_line(self) -> str:
        return f"trtpipe: interrupted in stage {self.stage}" if self.stage else "trtpipe: interrupted"

    @classmethod
    def of(cls, error: KeyboardInterrupt, stage: str | None = None) -> "Interrupted":
        """The Interrupted for any KeyboardInterrupt (a plain one is Ctrl-C), naming the stage."""
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
        return cls(signum, stage or (error.stage if isinstance(error, Interrupted) else None))


# Signals the handler turned into Interrupted, in order. Process-wide by nature (a signal
# handler is), read only through `signals_received` / `raise_if_signalled_since`.
_RECEIVED: list[int] = []


# Native extensions loading in the main thread, and the signals held until they are complete
# (`_hold_signals_while_extensions_initialise`): loader calls under way, and modules created but not
# yet executed (id -> when created; one never executed stops counting after AWAIT_EXEC_SECONDS).
_EXTENSION_CALLS = 0
_AWAITING_EXEC: dict[int, float] = {}
AWAIT_EXEC_SECONDS = 2.0
_HELD: list[int] = []


def _raise_interrupted(signum, _frame) -> None:
    _RECEIVED.append(int(signum))
    if _extension_loading():
        if not _HELD:  # delivered at the latest when the hold can no longer be justified
            _after(AWAIT_EXEC_SECONDS + 0.5, _redeliver_held)
        _HELD.append(int(signum))
        return
    _HELD.clear()
    raise Interrupted(signum)


def _extension_loading() -> bool:
    now = time.monotonic()
    return bool(_EXTENSION_CALLS) or any(now - since < AWAIT_EXEC_SECONDS for since in _AWAITING_EXEC.values())


def _redeliver_held() -> None:
    """From a timer thread: a signal still held (its extension's load never completed as expected)
    arrives again; the handler raises it, or holds it once more while a load is still under way."""
    if _HELD:
        _thread.interrupt_main(_HELD[-1])


def _after(seconds: float, function) -> None:
    timer = threading.Timer(seconds, function)
    timer.daemon = True
    try:
        timer.start()
    except RuntimeError:  # the interpreter is shutting down: the run is ending anyway
        pass


def signals_received() -> int:
    """How many SIGINT/SIGTERM the command line's handler has raised so far (a mark)."""
    return len(_RECEIVED)


def raise_if_signalled_since(mark: int, stage: str) -> None:
    """Raise Interrupted if a signal arrived after `mark`, even if the exception it raised was
    swallowed on the way. Decision: a stage's output is published only when no signal arrived
    while it ran. An Interrupted raised while a C extension was importing comes back as
    `ImportError: initialization failed`; a pass that catches `Exception` (an undoable graph
    pass, a fallback) then took it for its own failure, and the stage's result, quietly
    missing that pass, was cached for every later run (seen once in sanitize)."""
    if len(_RECEIVED) > mark:
        raise Interrupted(_RECEIVED[-1], stage)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM raise Interrupted in the main thread (the command line only).

    Decision: SIGINT too, not Python's default handler. The default raises a plain
    KeyboardInterrupt, and CPython can flag one "unhandled" (in a PyRun_* frame) even
    though trtpipe catches it; at exit it then kills the process with SIGINT
    (`exit_sigint`): exit -2 after the one line, instead of 130 (seen in CI on a
    non-editable install, ~1 run in 4; strace showed the process sending itself SIGINT
    after writing its manifest). The flag is only set for an exception of exactly
    KeyboardInterrupt's type; Interrupted is a subclass (14/14 runs exit 130)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _raise_interrupted)
        if not getattr(sys.unraisablehook, "redelivers_interrupted", False):
            sys.unraisablehook = _redeliver_unraisable_interrupted(sys.unraisablehook)
        if not getattr(threading.excepthook, "quiet_after_a_signal", False):
            threading.excepthook = _thread_deaths_after_a_signal_logged(threading.excepthook)
        _hold_signals_while_extensions_initialise()


def _hold_signals_while_extensions_initialise() -> None:
    """Decision: a signal that comes while a native extension module loads is raised as soon as
    the module is complete (created and executed), not inside it. Raised inside an extension's
    init, which often calls back into Python (onnx's nanobind module creates its enums there), it
    aborted the process ("terminate called after throwing an instance of 'nanobind::python_error'",
    SIGABRT); raised between the loader's two steps (create, then execute), it dropped a module
    created but never executed, and its deallocation crashed (SIGSEGV). Measured with a signal
    at a moment of `import onnx` (a timer at 9.8-11.9 ms): 16 and 19 of 40 imports aborted or
    crashed, and once in the sweep fuzz run, in a worker importing onnx for its first job.
    Every extension, not a list: which ones a run imports, and when, depends on its stages.
    The handler holds the signal, not a signal mask: a blocked signal is still taken by another
    thread (a process-directed signal goes to any thread not blocking it) and its Python handler
    then runs in the main thread all the same. Main thread only (a handler runs nowhere else)."""
    from importlib.machinery import ExtensionFileLoader

    if getattr(ExtensionFileLoader.create_module, "holds_signals", False):
        return
    original_create, original_exec = ExtensionFileLoader.create_module, ExtensionFileLoader.exec_module

    def create_module(self, spec):
        global _EXTENSION_CALLS
        if threading.current_thread() is not threading.main_thread():
            return original_create(self, spec)
        _EXTENSION_CALLS += 1
        try:
            module = original_create(self, spec)
            # By identity, not name: an extension's __name__ may differ from its spec's (`_decimal`
            # calls itself "decimal"); keyed by name, one never removed held every later signal.
            _AWAITING_EXEC[id(module)] = time.monotonic()
            return module
        finally:
            _EXTENSION_CALLS -= 1
            _raise_held_signal()

    def exec_module(self, module):
        global _EXTENSION_CALLS
        if threading.current_thread() is not threading.main_thread():
            return original_exec(self, module)
        _EXTENSION_CALLS += 1
        _AWAITING_EXEC.pop(id(module), None)
        try:
            return original_exec(self, module)
        finally:
            _EXTENSION_CALLS -= 1
            _raise_held_signal()

    create_module.holds_signals = True
    ExtensionFileLoader.create_module, ExtensionFileLoader.exec_module = create_module, exec_module


def _raise_held_signal() -> None:
    """Raise the last held signal once no extension is loading any more."""
    if _HELD and not _extension_loading():
        signum = _HELD[-1]
        _HELD.clear()
        raise Interrupted(signum)


def _redeliver_unraisable_interrupted(previous):
    """Decision: the handler raises at whatever bytecode the main thread is running, and that can be
    a weakref callback, a `__del__` or a garbage-collection hook, where an exception cannot
    propagate: Python printed "Exception ignored in: <function WeakValueDictionary...remove>" with
    a traceback and dropped the Ctrl-C (the sweep fuzz run, about 1 case in 15 once the other
    endings were fixed). Such an Interrupted is not printed; the same signal is delivered again
    (`_thread.interrupt_main`) from a timer thread 10 ms later, once this hook and the callback
    have returned: tripped from inside the hook, the handler would raise in the hook itself. A
    redelivery that lands in such a place again is redelivered again; one that comes while the
    run is already ending (signals held or ignored) does nothing. Any other unraisable exception
    goes to the previous hook."""

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous(unraisable)
            return
        signum = unraisable.exc_value.signum
        _after(0.01, lambda: _thread.interrupt_main(signum))

    hook.redelivers_interrupted = True
    return hook


def _thread_deaths_after_a_signal_logged(previous):
    """Decision: once a SIGINT/SIGTERM has come, an exception that ends a background thread goes
    to trtpipe.log (debug), not the console. The run is being torn down: a launcher's threads
    race the cancelled work, and joblib's loky (1.5) has a race of its own: its
    ExecutorManagerThread looks up a work item the interrupted sweep already removed and dies
    with `KeyError` — a traceback under the one-line `trtpipe: interrupted` (seen under load in
    tests/runner/test_signals_at_the_edges.py, Ctrl-C while workers start). Before any signal
    the previous hook runs: a thread's death then is a defect and shows."""

    def hook(args) -> None:
        if not _RECEIVED:
            previous(args)
            return
        import logging

        name = getattr(args.thread, "name", "?")
        logging.getLogger("trtpipe").debug("after signal %d, thread %s ended by %s: %s", _RECEIVED[-1], name,
                                           getattr(args.exc_type, "__name__", args.exc_type), args.exc_value)

    hook.quiet_after_a_signal = True
    return hook


@contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM while the manifest of an interrupted run is written (a second
    Ctrl-C must not leave it half-recorded); a held signal is dropped, the run is ending."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def launcher_workers_start_with_sigint_blocked() -> None:
    """In the launching process of a joblib sweep: loky starts every worker with SIGINT blocked.

    Decision: a worker is a new Python process (fork + exec), and from its start until trtpipe's
    task runs in it (its imports, then Hydra composing the job's config there) it had Python's
    default SIGINT handler. Ctrl-C signals the whole process group, so a Ctrl-C in that second
    or so raised KeyboardInterrupt inside the worker's imports or inside Hydra's composition: a
    `ConfigCompositionException` traceback, or exit 0 or 2 instead of 130 (the 1,000-case sweep
    fuzz run, session 7). A blocked signal stays pending across fork and exec (a signal mask is
    inherited; CPython does not touch it at start), so `worker_job_signals` sees it when the
    worker's first job starts and runs nothing. loky does the same around starting its resource
    tracker. The hook is loky's own `fork_exec` (looked up by loky at each start); where a joblib
    release lacks it, workers start as before (tests/runner/test_signals_at_the_edges.py checks it is there)."""
    try:
        from joblib.externals.loky.backend import fork_exec as loky_fork_exec
    except ImportError:  # no joblib launcher installed: nothing starts workers
        return
    original = getattr(loky_fork_exec, "fork_exec", None)
    if original is None or getattr(original, "blocks_sigint", False):
        return

    def fork_exec(*args, **kwargs):
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return original(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    fork_exec.blocks_sigint = True
    loky_fork_exec.fork_exec = fork_exec


@contextmanager
def worker_job_signals():
    """In a launcher's worker process (joblib's loky workers: multiprocessing children), SIGINT and
    SIGTERM interrupt the job it runs (Interrupted, as in the main process), and between jobs
    SIGINT is ignored and SIGTERM is the default again. Yields whether a SIGINT came before the
    job started (held pending since the worker started, `launcher_workers_start_with_sigint_blocked`):
    the sweep was interrupted and the job must not run.

    Decision: Ctrl-C signals the whole process group. A worker idle between jobs had Python's
    default handler, so the KeyboardInterrupt came out of loky's worker loop as a traceback from
    multiprocessing's bootstrap, and the sweep sometimes ended 0 with it, or died by SIGINT
    (the 1,000-case sweep fuzz run, about 1 in 8 Ctrl-C cases). Between jobs the launching
    process decides: it gets the same Ctrl-C, starts no new job and ends the sweep; loky stops
    idle workers with SIGTERM, which must keep its default. Setting SIG_IGN discards the pending
    SIGINT (POSIX) before it is unblocked."""
    import multiprocessing

    if multiprocessing.parent_process() is None or threading.current_thread() is not threading.main_thread():
        yield False
        return
    signalled_before = signal.SIGINT in signal.sigpending()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    install_signal_handlers()
    try:
        yield signalled_before
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
