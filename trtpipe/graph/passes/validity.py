"""What "a valid model" means to the graph passes, checked on a written file.

A pass may never turn a valid model into an invalid one. Valid is measured by
three criteria, the cheapest first:

- `checker`: `onnx.checker.check_model` (the structural check: topological
  order, every input produced, known ops, attribute types);
- `full_check`: the same with `full_check=True` (also ONNX's strict shape
  inference, which catches a value_info or output type that contradicts the
  graph);
- `onnxruntime`: an ONNX Runtime CPU session can be created (graph resolution,
  type inference and kernel lookup; nothing is run).

Decisions (each with its reason):
- A result must keep every criterion its *source* met, no more: a model that
  ONNX Runtime cannot load (a custom op, an IR newer than it knows) is not
  required to load after the pass either, and a model that fails the full
  check (an exporter's inconsistent value_info) is held to the plain checker.
  Otherwise trtpipe would blame the user's model for what its own pass did, or
  refuse models it accepted before.
- Checked on the written file, by path: the checker then reads external data
  relative to the model as onnx requires (on-disk weights are absolute
  locations in memory, which the checker refuses), and nothing is serialized
  twice. ONNX Runtime maps the weights from their file.
- Cost, measured on this machine (2 shared cores), on the written result: a
  2,092-node encoder 0.015 s for the checker, 0.036 s for the full check and
  0.2 s for the session (its sanitize: 1.5-4 s); a 588-node encoder with 605 MB
  of weights in a data file 0.026 s and 0.053 s (sanitize 2.3 s: +12%). So every
  criterion is checked on every model: with optimisations off and prepacking
  disabled, the session maps the weights and costs ~0.1 ms per node. The
  source file is checked only when the result falls short (to know what it met).
- Messages are kept whole (whitespace collapsed to one line): the reason a pass
  was undone, or a model refused, must say all the checker said.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import onnx

CHECKER, FULL_CHECK, ONNXRUNTIME = "checker", "full_check", "onnxruntime"
CRITERIA = (CHECKER, FULL_CHECK, ONNXRUNTIME)
DESCRIPTIONS = {
    CHECKER: "onnx.checker",
    FULL_CHECK: "onnx.checker (full_check=True)",
    ONNXRUNTIME: "an ONNX Runtime session",
}


def one_line(error: BaseException | str) -> str:
    """An error's whole text on one line (never shortened)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def file_problems(path: Path, criteria: Iterable[str] = CRITERIA) -> dict[str, str | None]:
    """Criterion -> None when `path` meets it, else the reason (one line, whole).

    `full_check` passing implies `checker`; the plain checker then is not run.
    """
    wanted = [criterion for criterion in CRITERIA if criterion in set(criteria)]
    problems: dict[str, str | None] = {}
    if FULL_CHECK in wanted:
        problems[FULL_CHECK] = _checker_problem(path, full_check=True)
    if CHECKER in wanted:
        problems[CHECKER] = None if problems.get(FULL_CHECK, "") is None else _checker_problem(path, full_check=False)
    if ONNXRUNTIME in wanted:
        problems[ONNXRUNTIME] = _onnxruntime_problem(path)
    return problems


def met(problems: dict[str, str | None]) -> set[str]:
    return {criterion for criterion, problem in problems.items() if problem is None}


def first_problem(problems: dict[str, str | None], required: Iterable[str]) -> str | None:
    """The first unmet required criterion, as '<what>: <reason>'; None when all are met."""
    for criterion in CRITERIA:
        if criterion in set(required) and problems.get(criterion) is not None:
            return f"{DESCRIPTIONS[criterion]}: {problems[criterion]}"
    return None


def _checker_problem(path: Path, *, full_check: bool) -> str | None:
    try:
        onnx.checker.check_model(str(path), full_check=full_check)
    except Exception as error:  # ValidationError, and InferenceError from the full check
        return one_line(error)
    return None


def _onnxruntime_problem(path: Path) -> str | None:
    import onnxruntime as ort

    from trtpipe.errors import is_out_of_memory
    from trtpipe.numerics.ort_logging import cpu_session, session_options
    from trtpipe.numerics.ort_session import ort_reason

    options = session_options()  # a failing load is the answer here, not a log line
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        cpu_session(str(path), options)
    except Exception as error:  # ONNX Runtime's own exception types
        if is_out_of_memory(error):  # the machine's limit, not the pass's output (errors.OutOfMemory)
            raise
        return ort_reason(error) or type(error).__name__
    return None
