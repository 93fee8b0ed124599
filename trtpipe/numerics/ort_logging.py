"""ONNX Runtime's own log lines never reach the terminal.

ONNX Runtime writes its log straight to the process's stderr, in colour and without
trtpipe's prefix (`[W:onnxruntime:, unsqueeze_elimination.cc:24 Apply] ...` from the
sessions onnx-graphsurgeon creates to fold constants; `[E:onnxruntime:, ...] Non-zero
status code returned while running Gather node` before the exception that says the
same). Its Python API offers no way to route those lines into Python's logging.

Decisions:
- Every session trtpipe creates logs at FATAL only (`session_options`), and ONNX
  Runtime's default logger, which the sessions of other libraries (onnx-graphsurgeon's
  constant folding, Polygraphy) use, is set to FATAL too (`quiet_onnxruntime`, once per
  process, before the first session).
- ONNX Runtime's Python wrapper prints a banner to stdout when a session cannot be created
  ("*** EP Error *** ... Falling back to ['CPUExecutionProvider'] and retrying", four lines)
  and retries with the same provider, whose error is then raised anyway (measured under
  `ulimit -v`: a thread that cannot start). Every session trtpipe creates goes through
  `cpu_session`, which sends that banner to trtpipe.log.
- Nothing that matters is lost: an ONNX Runtime error comes back as the exception
  that trtpipe reports in its own line (`ort_session.ort_reason`: the message, without
  the C++ source location); its warnings concern ONNX Runtime's own optimisations
  (which trtpipe's sessions switch off) and would not change what trtpipe decides.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging

logger = logging.getLogger(__name__)

# ONNX Runtime's severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.
ORT_FATAL = 4


@functools.cache
def quiet_onnxruntime():
    """`onnxruntime`, with its default logger at FATAL (done once per process)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(ORT_FATAL)
    logger.debug("ONNX Runtime's log set to FATAL only: its errors reach trtpipe as exceptions")
    return ort


def session_options():
    """A `SessionOptions` whose session logs nothing below FATAL."""
    ort = quiet_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = ORT_FATAL
    return options


def cpu_session(source, options=None):
    """An ONNX Runtime session on the CPU provider (`source`: a path or the model's bytes), its
    fallback banner kept off stdout (module docstring)."""
    ort = quiet_onnxruntime()
    banner = io.StringIO()
    try:
        with contextlib.redirect_stdout(banner):
            return ort.InferenceSession(source, options if options is not None else session_options(),
                                        providers=["CPUExecutionProvider"])
    finally:
        if banner.getvalue().strip():
            logger.debug("ONNX Runtime printed: %s", " ".join(banner.getvalue().split()))
