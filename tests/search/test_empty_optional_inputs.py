"""Optional inputs a model leaves unused stay unused in every graph trtpipe writes (issue 21, item 3).

A `Resize` by `sizes` leaves `roi` and `scales` unused, written either as empty names ('')
or, as many exporters and the opset converter write them, as constants with no element.
ONNX's shape inference accepts the empty constants only while it can see they are
constants: the search's switched emulation used to put a rounding `Where` in front of
every FP32 input, so ONNX Runtime refused the search's graph ("Either `sizes` or `scales`
must be provided, but not both of them") and the run ended with exit 1 naming the
model's node, on a model that runs.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from trtpipe.errors import TrtpipeGraphError, UserError
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.ort_session import OrtSession
from trtpipe.precision.materialize.materialize import materialize
from trtpipe.search.switched import SwitchedEmulation

RESIZES = ("/up_by_names", "/up_by_constants")


def _resize_model() -> onnx.ModelProto:
    """Conv -> Resize(roi='', scales='') -> Conv -> Resize(empty roi, empty scales constants) -> Conv."""
    rng = np.random.default_rng(21)

    def weight(name, shape):
        return numpy_helper.from_array(rng.normal(0.0, 0.3, shape).astype(np.float32), name)

    initializers = [
        weight("w1", (8, 3, 3, 3)), weight("w2", (8, 8, 3, 3)), weight("w3", (4, 8, 3, 3)),
        numpy_helper.from_array(np.array([1, 8, 16, 16], np.int64), "sizes_16"),
        numpy_helper.from_array(np.array([1, 8, 32, 32], np.int64), "sizes_32"),
        numpy_helper.from_array(np.zeros((0,), np.float32), "roi_empty"),
        numpy_helper.from_array(np.zeros((0,), np.float32), "scales_empty"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="/conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="/relu1"),
        helper.make_node("Resize", ["r1", "", "", "sizes_16"], ["u1"], name=RESIZES[0], mode="linear"),
        helper.make_node("Conv", ["u1", "w2"], ["c2"], name="/conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c2", "roi_empty", "scales_empty", "sizes_32"], ["u2"], name=RESIZES[1],
                         mode="nearest"),
        helper.make_node("Conv", ["u2", "w3"], ["y"], name="/conv3", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(nodes, "resize_by_sizes", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                       [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32, 32])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _optional_inputs(model: onnx.ModelProto) -> dict[str, list]:
    """Per Resize: what its roi and scales slots read ('' or the element count of the constant there)."""
    constants = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    found = {}
    for node in model.graph.node:
        if node.op_type == "Resize":
            found[node.name] = [name if not name else constants.get(name, "computed") for name in node.input[1:3]]
    return found


def test_every_graph_keeps_the_unused_inputs_empty_and_runs():
    model = _resize_model()
    unused = {RESIZES[0]: ["", ""], RESIZES[1]: [0, 0]}
    assert _optional_inputs(model) == unused
    feeds = {"x": np.random.default_rng(3).normal(size=(1, 3, 8, 8)).astype(np.float32)}
    switched = SwitchedEmulation(model)  # ONNX Runtime refused it before
    assert not [key for key in switched.inputs if key[0] in RESIZES and key[1] in (1, 2)]
    names = [node.name for node in model.graph.node]
    for count in range(len(names) + 1):
        for fp32 in itertools.combinations(names, count):
            plan = {name: "fp32" if name in fp32 else "fp16" for name in names}
            candidate, report = materialize(model, plan)
            assert _optional_inputs(candidate) == unused, fp32
            full = EmulatedRunner(candidate, expose_intermediates=True)
            assert _optional_inputs(full.emulation.model) == unused, fp32
            switches = switched.switches(candidate, report)
            assert switches is not None
            np.testing.assert_array_equal(switched.run(feeds, switches)["y"], full.run(feeds)["y"])


def test_a_graph_trtpipe_built_that_onnx_runtime_refuses_says_it_is_trtpipe_s():
    # The refused graph of the bug, built the way switched.py used to: a rounding Where in front of
    # the empty scales. The failure names trtpipe's graph and says the model is not at fault.
    model = _resize_model()
    scales = "scales_empty"
    rounded = helper.make_node("Where", ["switch", scales, scales], ["scales_rounded"], name="round")
    model.graph.node.insert(0, rounded)
    model.graph.input.append(helper.make_tensor_value_info("switch", TensorProto.BOOL, []))
    resize = next(n for n in model.graph.node if n.name == RESIZES[1])
    resize.input[2] = "scales_rounded"
    with pytest.raises(TrtpipeGraphError) as error:
        OrtSession(model, graph="the search's switched emulation graph (switched.py)")
    message = str(error.value)
    assert "trtpipe's own graph (the search's switched emulation graph (switched.py))" in message
    assert "not the model as given" in message and "Either `sizes` or `scales`" in message
    assert not isinstance(error.value, UserError)


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("empty_optional")
    onnx.save(_resize_model(), str(workdir / "resize.onnx"))
    # A tight rel_l2 makes the automatic plan fail, so the search runs trials beyond the first.
    return run_trtpipe(workdir, "+recipe=transformer_fp16_search", f"model.path={workdir / 'resize.onnx'}",
                       "validate.tolerance.rel_l2=0.0003", "validate.tolerance.cosine_min=0.99999999")


def test_the_search_through_the_cli_runs_on_the_switched_graph(search_run):
    assert search_run.code == 0, search_run.stdout + search_run.stderr
    assert "Either `sizes` or `scales`" not in search_run.stdout + search_run.stderr
    search = json.loads((search_run.run_dir / "precision" / "search.json").read_text())
    assert len(search["trials"]) > 1 and search["passed"]
    assert search["emulation"]["switched"] == len(search["trials"]) and search["emulation"]["full"] == 0
    written = onnx.load(str(search_run.run_dir / "precision" / "model.onnx"))
    assert [values[0] for values in _optional_inputs(written).values()] == ["", 0]


def test_a_refused_switched_graph_leaves_the_search_to_the_full_emulation(monkeypatch, caplog):
    # Should ONNX Runtime ever refuse the switched graph again, the trials run the validate stage's way.
    from trtpipe.search import trials
    from trtpipe.validate.compare import Tolerances

    def refused(model):
        raise TrtpipeGraphError("ONNX Runtime cannot load trtpipe's own graph (the search's switched emulation)")

    monkeypatch.setattr(trials, "SwitchedEmulation", refused)
    model = _resize_model()
    names = [node.name for node in model.graph.node]
    feeds = [{"x": np.random.default_rng(4).normal(size=(1, 3, 8, 8)).astype(np.float32)}]
    runner = trials.TrialRunner(model, {}, names, feeds, Tolerances.from_mapping({"rel_l2": 0.014}))
    with caplog.at_level("WARNING", logger="trtpipe.search.trials"):
        outcome = runner.evaluate(frozenset())
    assert outcome.passed and runner.emulations == {"switched": 0, "full": 1}
    assert runner.not_switched.startswith("ONNX Runtime refused the switched graph: ONNX Runtime cannot load")
    assert "every trial runs on its own emulated graph instead" in caplog.text
