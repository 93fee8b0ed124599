"""gs_order.cleaned_and_sorted gives onnx-graphsurgeon's cleanup + toposort node order without the round
trip, and sanitize (which uses it when folding follows) writes the same bytes as with the round trip."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench.same_output.same_output_cases import shuffled
from tests.graph import graphs
from trtpipe.graph import sanitize as sanitize_module
from trtpipe.graph.onnx_gs.gs_order import cleaned_and_sorted
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.sanitize import _cleanup_and_sort, sanitize_model
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.inputs import generate_inputs



def _diamond_with_dead_branch() -> onnx.ModelProto:
    """Shared inputs, a node reading one tensor twice, a dead branch, a dead node feeding a live one's input."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/a"),
        helper.make_node("Neg", ["x"], ["dead"], name="/dead"),
        helper.make_node("Mul", ["a", "a"], ["b"], name="/b"),
        helper.make_node("Sigmoid", ["dead"], ["dead2"], name="/dead2"),
        helper.make_node("Add", ["b", "x"], ["c"], name="/c"),
        helper.make_node("Sub", ["c", "a"], ["y"], name="/y"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 3])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])


MODELS = {
    "transformer": lambda: builtin_model("transformer"),
    "t5-shuffled": lambda: shuffled(builtin_model("t5"), 0),
    "gpt2-shuffled": lambda: shuffled(builtin_model("gpt2"), 1),
    "foldable-shuffled": lambda: graphs.foldable_graph(shuffled=True),
    "diamond-dead-shuffled": lambda: shuffled(_diamond_with_dead_branch(), 2),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("cleanup", [True, False])
def test_node_order_is_graphsurgeons(name, cleanup):
    model = MODELS[name]()
    ours = cleaned_and_sorted(model, cleanup=cleanup)
    theirs = _cleanup_and_sort(model, cleanup=cleanup, toposort=True)
    assert [n.name for n in ours.graph.node] == [n.name for n in theirs.graph.node]
    assert [n.name for n in model.graph.node] != [n.name for n in ours.graph.node] or name == "transformer"
    onnx.checker.check_model(ours)  # sorted: every input is produced before it is read


def test_out_of_scope_models_are_left_to_graphsurgeon():
    x = graphs.float_input("x", [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    twice = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]
    assert cleaned_and_sorted(graphs.make_model(twice, [x], [y]), cleanup=True) is None
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "branch", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    body = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    assert cleaned_and_sorted(graphs.make_model([body], [x, cond], [y]), cleanup=True) is None
    cycle = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Identity", ["a"], ["y"])]
    assert cleaned_and_sorted(graphs.make_model(cycle, [x], [y]), cleanup=True) is None


@pytest.mark.parametrize("name", MODELS)
def test_sanitize_writes_the_same_bytes_as_with_the_round_trip(tmp_path, monkeypatch, name):
    model = MODELS[name]()
    save_model(model, tmp_path / "in.onnx")
    sanitize_model(tmp_path / "in.onnx", tmp_path / "fast.onnx")
    monkeypatch.setattr(sanitize_module, "cleaned_and_sorted", lambda *_, **__: None)  # the reference: gs
    sanitize_model(tmp_path / "in.onnx", tmp_path / "round-trip.onnx")
    assert (tmp_path / "fast.onnx").read_bytes() == (tmp_path / "round-trip.onnx").read_bytes()
    out = onnx.load(str(tmp_path / "fast.onnx"))
    spec = BUILTIN_INPUT_SPECS.get(name.split("-")[0], {})
    feeds = generate_inputs(model, spec, seed=0, iterations=1)[0]
    for got, want in zip(graphs.run(out, feeds), graphs.run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
