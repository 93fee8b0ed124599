"""Defects the corpus run (bench/corpus/corpus.py) found in the graph passes, each pinned by a small graph."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench.corpus.corpus_data import node_cases
from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.graph.passes.shape_ranges import restore_shape_ranges, split_shape_ranges


def _ranged_shape_model(dims) -> onnx.ModelProto:
    """y = Reshape(x, Concat(Shape(x, 0, 1), Shape(x, -2, -1), [-1])): x [2, 4, 6] -> [2, 4, 6]."""
    minus_one = helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])
    nodes = [
        helper.make_node("Shape", ["x"], ["batch"], name="batch", start=0, end=1),
        helper.make_node("Shape", ["x"], ["seq"], name="seq", start=-2, end=-1),
        helper.make_node("Concat", ["batch", "seq", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", dims)],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [minus_one], opset=17)


def _sanitized(tmp_path, model):
    save_model(model, tmp_path / "in.onnx")
    sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    return onnx.load(str(tmp_path / "out.onnx"))


def test_ranged_shape_of_static_input_folds_to_its_slice(tmp_path):
    # onnx-graphsurgeon alone folds Shape(x, start, end) into the whole shape of x
    # (corpus: test_attention_*_expanded failed the checker after sanitize).
    model = _ranged_shape_model([2, 4, 6])
    out = _sanitized(tmp_path, model)
    onnx.checker.check_model(out, full_check=True)
    assert "Shape" not in [node.op_type for node in out.graph.node]
    x = graphs.random_input((2, 4, 6))
    result = graphs.run(out, {"x": x})[0]
    assert result.shape == (2, 4, 6)
    np.testing.assert_array_equal(result, graphs.run(model, {"x": x})[0])


def test_ranged_shape_of_dynamic_input_comes_back_unchanged(tmp_path):
    model = _ranged_shape_model(["batch", "seq", 6])
    out = _sanitized(tmp_path, model)
    onnx.checker.check_model(out, full_check=True)
    shapes = [node for node in out.graph.node if node.op_type == "Shape"]
    assert [(n.name, sorted((a.name, a.i) for a in n.attribute)) for n in shapes] == [
        ("batch", [("end", 1), ("start", 0)]), ("seq", [("end", -1), ("start", -2)])]
    assert not [t.name for t in out.graph.initializer if "__trtpipe" in t.name]
    assert not [n.name for n in out.graph.node if "__trtpipe" in n.name]
    x = graphs.random_input((3, 5, 6))
    np.testing.assert_array_equal(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0])


@pytest.mark.parametrize("attributes", [{}, {"start": 0}])
def test_whole_shape_nodes_are_not_rewritten(attributes):
    node = helper.make_node("Shape", ["x"], ["s"], name="s", **attributes)
    model = graphs.make_model([node], [graphs.float_input("x", [2, 3])],
                              [helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    before = model.SerializeToString()
    assert split_shape_ranges(model) == []
    assert model.SerializeToString() == before


def test_split_then_restore_is_the_identity():
    model = _ranged_shape_model(["batch", "seq", 6])
    before = model.SerializeToString()
    originals = split_shape_ranges(model)
    assert [n.op_type for n in model.graph.node][:4] == ["Shape", "Slice", "Shape", "Slice"]
    assert restore_shape_ranges(model, originals) == 2
    assert model.SerializeToString() == before


def _partly_foldable_model() -> onnx.ModelProto:
    """y = x + (a + b) + Cast(ReduceMax(c_bf16)): ONNX Runtime's CPU has no bf16 ReduceMax."""
    a = helper.make_tensor("a", TensorProto.FLOAT, [2], [1.0, 2.0])
    b = helper.make_tensor("b", TensorProto.FLOAT, [2], [3.0, 4.0])
    c = helper.make_tensor("c", TensorProto.BFLOAT16, [2], [5.0, 6.0])
    nodes = [
        helper.make_node("Add", ["a", "b"], ["ab"], name="fold_me"),
        helper.make_node("ReduceMax", ["c"], ["c_max"], name="cpu_lacks_bf16", keepdims=1),
        helper.make_node("Cast", ["c_max"], ["c_max_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "ab"], ["xab"], name="add_x"),
        helper.make_node("Add", ["xab", "c_max_f"], ["y"], name="add_c"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [2])], [graphs.float_input("y", [2])],
                             [a, b, c], opset=20, ir_version=9)


def test_a_constant_subgraph_onnx_runtime_cannot_evaluate_does_not_stall_folding(tmp_path):
    # Corpus: test_attention_*_bf16_expanded took 70-100 s in sanitize: onnx-graphsurgeon's "basic"
    # partitioning retried the failing partition until the recursion limit, then folded nothing.
    start = time.perf_counter()
    out = _sanitized(tmp_path, _partly_foldable_model())
    assert time.perf_counter() - start < 10
    ops = [node.name for node in out.graph.node]
    assert "fold_me" not in ops  # the evaluable part folded
    assert "cpu_lacks_bf16" in ops  # the rest left as it was
    onnx.checker.check_model(out, full_check=True)


def test_an_ir3_model_whose_initializers_are_inputs_stays_valid(tmp_path):
    # Corpus: every light_* model (IR 3) was rejected as "not a valid ONNX graph: ... in initializer
    # but not in graph input": onnx-graphsurgeon drops initializers from the inputs, which IR 3 needs.
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [2.0, 3.0])
    model = graphs.make_model([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")],
                              [graphs.float_input("x", [2]), graphs.float_input("w", [2])],
                              [graphs.float_input("y", [2])], [w], opset=8, ir_version=3)
    onnx.checker.check_model(model, full_check=True)
    out = _sanitized(tmp_path, model)
    onnx.checker.check_model(out, full_check=True)
    assert out.ir_version == 4 and [value.name for value in out.graph.input] == ["x"]
    x = graphs.random_input((2,))
    np.testing.assert_array_equal(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0])


def test_optional_graph_inputs_are_a_user_error_not_a_crash(tmp_path):
    # Corpus: test_identity_opt, test_optional_*: UnboundLocalError inside onnx-graphsurgeon's exporter.
    optional = helper.make_value_info(
        "opt_in", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    out = helper.make_value_info("opt_out", optional.type)
    model = graphs.make_model([helper.make_node("Identity", ["opt_in"], ["opt_out"], name="id")],
                              [optional], [out], opset=16)
    save_model(model, tmp_path / "in.onnx")
    with pytest.raises(UserError, match="optional-typed input/output 'opt_in'") as error:
        sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out.onnx").exists()


def test_folding_that_loses_an_inlined_branch_is_undone(tmp_path):
    # Corpus: test_affine_grid_*_expanded were rejected as "not a valid ONNX graph" after sanitize:
    # folding inlined an If and left a Div reading a branch tensor nothing produced.
    case = next(c for c in node_cases(["affinegrid"]) if c.name == "test_affine_grid_2d_expanded")
    save_model(case.model, tmp_path / "in.onnx")
    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    assert any("constant folding was undone" in warning for warning in report["warnings"])
    out = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(out, full_check=True)
    inputs, expected = case.data_sets[0]
    feeds = {value.name: array for value, array in zip(case.model.graph.input, inputs)}
    np.testing.assert_allclose(graphs.run(out, feeds)[0], expected[0], rtol=1e-5, atol=1e-6)
