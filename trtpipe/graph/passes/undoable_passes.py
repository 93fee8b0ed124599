"""A sequence of graph passes, each undone for this model when it breaks it.

Decisions (each with its reason):
- A pass is undone, and the sequence goes on with the model as it was before
  it, when it raises (anything but a `UserError`, which is the user's to fix)
  or when the check given for it fails. The reason goes into the report (the
  stage's summary line and `trtpipe.log` show it): a pass that would make a
  valid model invalid costs the user that pass on this model, never the run.
- Passes that edit the model in place (`in_place=True`) are undone from a copy
  of everything but the main graph's initializers, taken before they run: they
  never touch those (shape inference, value_info removal, attribute fixes), and
  the weights are the part of a model too big to copy for nothing. Other
  passes return a new model and leave theirs as it was.
- What a pass reports (`facts`) counts only when the pass is kept, so an undone
  folding does not claim folded nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import onnx

from trtpipe.errors import OutOfMemory, UserError, is_out_of_memory
from trtpipe.onnxmodel.model_parts import model_without_initializers
from trtpipe.graph.passes.validity import one_line

logger = logging.getLogger(__name__)

PassResult = tuple[onnx.ModelProto, dict]


class PassRefused(Exception):
    """Raised by a pass that finds its own result unusable; the message is the reason it is undone."""


@dataclass(frozen=True)
class GraphPass:
    name: str  # as the report says it: "constant folding"
    run: Callable[[onnx.ModelProto], PassResult]  # the model, and facts for the report
    in_place: bool = False


def run_passes(
    model: onnx.ModelProto,
    passes: list[GraphPass],
    report: dict,
    check: Callable[[onnx.ModelProto], str | None] | None = None,
) -> onnx.ModelProto:
    """Run `passes` in order; a pass that raises or fails `check` is undone (listed in report["undone"])."""
    report.setdefault("undone", [])
    for graph_pass in passes:
        snapshot = model_without_initializers(model) if graph_pass.in_place else None
        try:
            result, facts = graph_pass.run(model)
            problem = check(result) if check is not None else None
        except UserError:
            raise
        except PassRefused as refusal:
            result, problem = None, one_line(refusal)
        except Exception as error:  # a pass's own failure: onnx-graphsurgeon, Polygraphy, onnx raise many types
            if is_out_of_memory(error):  # the machine's limit: undoing the pass would cache another output
                raise OutOfMemory(f"sanitize's {graph_pass.name}", error) from None
            logger.debug("sanitize: %s raised", graph_pass.name, exc_info=True)
            result, problem = None, f"it raised {type(error).__name__}: {one_line(error)}"
        if problem is None:
            model = result
            for key, value in facts.items():
                if key == "warnings":
                    report.setdefault("warnings", []).extend(value)
                else:
                    report[key] = value
            continue
        report["undone"].append({"pass": graph_pass.name, "reason": problem})
        logger.info("%s undone: %s", graph_pass.name, problem)  # the caller warns once, with its context
        if snapshot is not None:
            snapshot.graph.initializer.extend(model.graph.initializer)
            model = snapshot
    return model
