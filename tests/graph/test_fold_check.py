"""fold_check.may_fold, and sanitize's skipping of folding passes that cannot change the model.

`may_fold` may answer True too often (the passes then run as before) but never
False when a pass would fold something; sanitize's output must be the same,
byte for byte, as when every folding pass runs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from polygraphy.backend.onnx import fold_constants

from tests.graph import graphs
from trtpipe.graph import sanitize as sanitize_module
from trtpipe.graph.fold.fold_check import may_fold
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.inputs import generate_inputs


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _shape_model(dims, tail_nodes, tail_inits, out_shape):
    """x[dims] -> Shape -> <tail> -> Reshape(x, target) -> y (the tail computes the target)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="/Shape"), *tail_nodes,
             helper.make_node("Reshape", ["x", "target"], ["y"], name="/Reshape")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    return onnx.shape_inference.infer_shapes(graphs.make_model(nodes, [x], [y], tail_inits))


def _slice_model(dims, start, end):
    tail = [helper.make_node("Slice", ["shape", "starts", "ends", "axes"], ["lead"], name="/Slice"),
            helper.make_node("Concat", ["lead", "tail"], ["target"], name="/Concat", axis=0)]
    inits = [_ints("starts", [start]), _ints("ends", [end]), _ints("axes", [0]), _ints("tail", [-1])]
    return _shape_model(dims, tail, inits, None)


def _gather_model(dims, index):
    tail = [helper.make_node("Gather", ["shape", "index"], ["dim"], name="/Gather", axis=0),
            helper.make_node("Concat", ["dim", "tail"], ["target"], name="/Concat", axis=0)]
    return _shape_model(dims, tail, [_ints("index", [index]), _ints("tail", [-1])], None)


def _ops_after_one_pass(model):
    return [node.op_type for node in fold_constants(model, num_passes=1, error_ok=True).graph.node]


@pytest.mark.parametrize("model, expected", [
    (_slice_model(["batch", 16, 64], 0, -1), False),  # keeps the dynamic batch: not foldable
    (_slice_model(["batch", 16, 64], 1, 3), True),  # static dims only
    (_gather_model(["batch", 16, 64], 0), False),
    (_gather_model(["batch", 16, 64], 2), True),
    (_slice_model([2, 16, 64], 0, -1), True),  # the Shape itself is static
])
def test_shape_parts_are_foldable_exactly_when_their_dims_are_static(model, expected):
    assert may_fold(model) is expected
    ops = [node.op_type for node in model.graph.node]
    # The claim checked against onnx-graphsurgeon itself: False means a pass changes nothing.
    assert (_ops_after_one_pass(model) != ops) is expected


def test_constants_foldable_nodes_cast_elision_and_bodies_answer_true():
    x = graphs.float_input("x", [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    constant = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(3, np.float32)))
    assert may_fold(graphs.make_model([constant, helper.make_node("Add", ["x", "c"], ["y"])], [x], [y]))
    assert may_fold(graphs.foldable_graph())  # Add of two initializers
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [3])
    out = helper.make_tensor_value_info("out", TensorProto.INT64, [3])
    elided = [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
              helper.make_node("Add", ["f", "one"], ["g"]),
              helper.make_node("Cast", ["g"], ["out"], to=TensorProto.INT64)]
    one = numpy_helper.from_array(np.ones(3, np.float32), "one")
    assert not may_fold(graphs.make_model([elided[0], elided[2]], [ids], [out]))
    assert may_fold(graphs.make_model(elided, [ids], [out], [one]))
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "branch", [], [
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    body = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    assert may_fold(graphs.make_model([body], [x, cond], [y]))


def _sanitized_bytes(tmp_path, model, name) -> bytes:
    save_model(model, tmp_path / f"{name}-in.onnx")
    sanitize_model(tmp_path / f"{name}-in.onnx", tmp_path / f"{name}.onnx")
    return (tmp_path / f"{name}.onnx").read_bytes()


@pytest.mark.parametrize("build", [
    lambda: builtin_model("transformer"),
    lambda: builtin_model("nafnet"),
    lambda: _slice_model(["batch", 16, 64], 0, -1),
    # A Shape that folds only in a second pass: its input's shape is known once the
    # Reshape target (Add of two constants) is folded and shapes are inferred again.
    lambda: graphs.make_model(
        [helper.make_node("Add", ["t0", "t1"], ["target"], name="/Add"),
         helper.make_node("Reshape", ["x", "target"], ["r"], name="/Reshape"),
         helper.make_node("Shape", ["r"], ["s"], name="/Shape"),
         helper.make_node("Cast", ["s"], ["sf"], name="/Cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "sf"], ["y"], name="/Mul")],
        [graphs.float_input("x", [3, 2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_ints("t0", [3, 1]), _ints("t1", [0, 1])]),
], ids=["transformer", "nafnet", "dynamic-shape-path", "second-pass-shape"])
def test_sanitize_writes_the_same_bytes_as_with_every_folding_pass(tmp_path, monkeypatch, request, build):
    model = build()
    fast = _sanitized_bytes(tmp_path, model, "fast")
    monkeypatch.setattr(sanitize_module, "may_fold", lambda _model, _settled=(): True)  # reference: every pass
    assert fast == _sanitized_bytes(tmp_path, model, "every-pass")
    out = onnx.load_from_string(fast)
    assert not may_fold(out)  # nothing left that a further pass could fold
    name = request.node.callspec.id
    specs = {"x": {"shape": [2, 16, 64]}} if name == "dynamic-shape-path" else BUILTIN_INPUT_SPECS.get(name, {})
    feeds = generate_inputs(model, specs, seed=0, iterations=1)[0]
    for got, want in zip(graphs.run(out, feeds), graphs.run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
