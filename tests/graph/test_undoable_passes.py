"""run_passes: a pass that raises or fails its check leaves the model exactly as it was before it."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.graph.passes.undoable_passes import GraphPass, PassRefused, run_passes


def _half_done_edit(model):
    """Edits in place (an attribute, a value_info, an output type), then fails: what an undo must reverse."""
    model.graph.node[0].attribute.append(helper.make_attribute("allowzero", 0))
    model.graph.value_info.append(graphs.float_input("scaled", [99]))
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    raise ValueError("half way")


def _renamed_copy(model):
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    copy.graph.node[0].name = "renamed"
    return copy, {"renamed": 1}


def test_an_in_place_pass_that_raises_is_undone_to_the_byte():
    model = graphs.foldable_graph()
    before = model.SerializeToString()
    report: dict = {}
    out = run_passes(model, [GraphPass("half-done edit", _half_done_edit, in_place=True)], report)
    assert out.SerializeToString() == before
    assert report["undone"] == [{"pass": "half-done edit", "reason": "it raised ValueError: half way"}]


def test_a_pass_failing_its_check_is_undone_and_its_facts_not_counted():
    model = graphs.foldable_graph()
    report: dict = {}
    out = run_passes(model, [GraphPass("rename", _renamed_copy)], report,
                     check=lambda candidate: "renamed" if candidate.graph.node[0].name == "renamed" else None)
    assert out is model and "renamed" not in report
    assert report["undone"] == [{"pass": "rename", "reason": "renamed"}]


def test_kept_passes_report_their_facts_and_a_refusal_gives_its_reason():
    def refuse(model):
        raise PassRefused("not this model")

    report: dict = {"warnings": []}
    out = run_passes(graphs.foldable_graph(), [GraphPass("rename", _renamed_copy), GraphPass("refuse", refuse)], report)
    assert out.graph.node[0].name == "renamed" and report["renamed"] == 1
    assert report["undone"] == [{"pass": "refuse", "reason": "not this model"}]


def test_a_user_error_is_the_users_and_is_not_undone():
    def user_problem(model):
        raise UserError("the model has an optional input", "re-export it")

    with pytest.raises(UserError, match="optional input"):
        run_passes(graphs.foldable_graph(), [GraphPass("export", user_problem)], {})
