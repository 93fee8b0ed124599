"""sanitize_model: folds, removes dead nodes, sorts, infers shapes, keeps numerics, same bytes."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper

from tests.graph import graphs
from trtpipe.onnxmodel import value_info
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.graph.sanitize import sanitize_model


def sanitize(tmp_path, model: onnx.ModelProto, **options):
    save_model(model, tmp_path / "in.onnx")
    report = sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx", **options)
    return onnx.load(str(tmp_path / "out.onnx")), report


def test_folds_removes_dead_sorts_and_keeps_numerics(tmp_path):
    model = graphs.foldable_graph(shuffled=True)
    out, report = sanitize(tmp_path, model)

    assert [node.op_type for node in out.graph.node] == ["Mul", "Reshape"]
    assert "a_plus_b" in {tensor.name for tensor in out.graph.initializer}
    assert report["dead_nodes_removed"] == 1 and report["nodes_folded"] == 1
    assert json.loads(json.dumps(report)) == report
    assert (report["nodes_before"], report["nodes_after"]) == (4, 2)
    onnx.checker.check_model(out, full_check=True)  # also checks topological order
    x = graphs.random_input((2, 3))
    np.testing.assert_array_equal(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0])


def test_infers_shapes_and_strips_stale_value_info(tmp_path):
    model = graphs.foldable_graph()
    model.graph.value_info.extend([
        helper.make_tensor_value_info("ghost", onnx.TensorProto.FLOAT, [7]),  # no such tensor
        helper.make_tensor_value_info("a_plus_b", onnx.TensorProto.FLOAT, [99]),  # folded away
    ])
    out, report = sanitize(tmp_path, model)
    shapes = {info.name: [d.dim_value for d in info.type.tensor_type.shape.dim] for info in out.graph.value_info}
    assert shapes == {"scaled": [2, 3]}
    assert report["value_info_stripped"] >= 1


def test_reshape_allowzero_made_explicit(tmp_path):
    out, report = sanitize(tmp_path, graphs.foldable_graph())
    reshape = next(node for node in out.graph.node if node.op_type == "Reshape")
    assert helper.get_attribute_value(reshape.attribute[0]) == 0
    assert report["reshape_allowzero_made_explicit"] == ["/Reshape"]


def test_options_off_leave_graph_alone(tmp_path):
    model = graphs.foldable_graph()
    out, report = sanitize(
        tmp_path, model, infer_shapes=False, fold_constants=False, cleanup=False,
        toposort=False, fix_reshape_allowzero=False,
    )
    assert [n.name for n in out.graph.node] == [n.name for n in model.graph.node]


def test_output_is_byte_deterministic_and_keeps_metadata(tmp_path):
    model = graphs.foldable_graph(shuffled=True)
    model.metadata_props.add(key="author", value="test")
    save_model(model, tmp_path / "in.onnx")
    first = sanitize_model(tmp_path / "in.onnx", tmp_path / "a.onnx")
    second = sanitize_model(tmp_path / "in.onnx", tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert {k: v for k, v in first.items() if k != "files"} == {k: v for k, v in second.items() if k != "files"}
    assert [(p.key, p.value) for p in onnx.load(str(tmp_path / "a.onnx")).metadata_props] == [("author", "test")]


def test_source_with_external_data(tmp_path):
    model = graphs.layernorm_graph(shape=(2, 3, 512))  # 2 KiB gamma and beta go external
    save_model(model, tmp_path / "in.onnx", external_threshold_bytes=100)
    assert (tmp_path / "in.onnx.data").exists()
    sanitize_model(tmp_path / "in.onnx", tmp_path / "out.onnx")
    x = graphs.random_input((2, 3, 512))
    out = onnx.load(str(tmp_path / "out.onnx"))
    np.testing.assert_allclose(graphs.run(out, {"x": x})[0], graphs.run(model, {"x": x})[0], atol=1e-6)


def test_shape_inference_runs_on_a_weightless_copy_and_keeps_the_weights():
    model = graphs.layernorm_graph(shape=(2, 3, 512))
    weights = [tensor.SerializeToString() for tensor in model.graph.initializer]
    skeleton = value_info.weightless_copy(model)
    assert skeleton.ByteSize() < 2 * 512 * 4 < model.ByteSize(), "the 2 KiB gamma and beta are not in the copy"
    inferred = value_info.infer_shapes(model)
    assert inferred is model, "in place"
    assert "centered" in {info.name for info in model.graph.value_info}
    assert [tensor.SerializeToString() for tensor in model.graph.initializer] == weights
