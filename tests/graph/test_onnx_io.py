"""load_model: every user-fixable problem is a one-line UserError; save_model: external data done right."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel.onnx_io import load_model, save_model


def weights_model() -> onnx.ModelProto:
    """MatMul with a 4 KiB float weight, Gather from a 2.4 KiB int64 table, a tiny float bias."""
    weight = numpy_helper.from_array(np.arange(1024, dtype=np.float32).reshape(32, 32) / 100, "weight")
    table = numpy_helper.from_array(np.arange(300, dtype=np.int64), "int64_table")
    bias = numpy_helper.from_array(np.ones(32, np.float32), "small_bias")
    nodes = [
        helper.make_node("MatMul", ["x", "weight"], ["mm"], name="/MatMul"),
        helper.make_node("Add", ["mm", "small_bias"], ["y"], name="/Add"),
        helper.make_node("Gather", ["int64_table", "idx"], ["picked"], name="/Gather"),
    ]
    inputs = [graphs.float_input("x", [2, 32]), helper.make_tensor_value_info("idx", TensorProto.INT64, [3])]
    outputs = [graphs.float_input("y", [2, 32]), helper.make_tensor_value_info("picked", TensorProto.INT64, [3])]
    return graphs.make_model(nodes, inputs, outputs, [weight, table, bias])


def assert_one_line_user_error(path, text: str, **kwargs) -> None:
    with pytest.raises(UserError) as caught:
        load_model(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and text in message and "Fix:" in message
    assert str(path.name) in message


def test_missing_file(tmp_path):
    assert_one_line_user_error(tmp_path / "x.onnx", "does not exist. Fix: check model.path")


def test_empty_file(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert_one_line_user_error(tmp_path / "empty.onnx", "is empty")


def test_truncated_file(tmp_path):
    data = weights_model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    assert_one_line_user_error(tmp_path / "cut.onnx", "not a valid ONNX protobuf")


def test_text_file(tmp_path):
    (tmp_path / "notes.onnx").write_text("this is not a model\nsecond line\n")
    assert_one_line_user_error(tmp_path / "notes.onnx", "not a valid ONNX protobuf")


def test_protobuf_without_graph(tmp_path):
    (tmp_path / "nograph.onnx").write_bytes(onnx.ModelProto(ir_version=8).SerializeToString())
    assert_one_line_user_error(tmp_path / "nograph.onnx", "is not an ONNX model")


def test_missing_external_data_file_is_named(tmp_path):
    save_model(weights_model(), tmp_path / "m.onnx", external_threshold_bytes=100)
    (tmp_path / "m.onnx.data").unlink()
    assert_one_line_user_error(tmp_path / "m.onnx", "m.onnx.data")
    assert load_model(tmp_path / "m.onnx", load_external_data=False).graph.initializer


def test_truncated_external_data_file(tmp_path):
    save_model(weights_model(), tmp_path / "m.onnx", external_threshold_bytes=100)
    data = tmp_path / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    assert_one_line_user_error(tmp_path / "m.onnx", "m.onnx.data")


def test_small_model_is_one_file_with_deterministic_bytes(tmp_path):
    model = weights_model()
    assert save_model(model, tmp_path / "a.onnx") == [tmp_path / "a.onnx"]
    save_model(model, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert (tmp_path / "a.onnx").read_bytes() == model.SerializeToString()


def test_external_data_keeps_int64_and_small_tensors_inline(tmp_path):
    model = weights_model()
    before = model.SerializeToString()
    (tmp_path / "m.onnx.data").write_bytes(b"stale" * 5000)  # must be replaced, not appended to

    written = save_model(model, tmp_path / "m.onnx", external_threshold_bytes=100)

    assert written == [tmp_path / "m.onnx", tmp_path / "m.onnx.data"]
    assert model.SerializeToString() == before, "the caller's model must not change"
    stored = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    location = {t.name: t.data_location for t in stored.graph.initializer}
    assert location == {
        "weight": TensorProto.EXTERNAL,
        "int64_table": TensorProto.DEFAULT,
        "small_bias": TensorProto.DEFAULT,
    }
    assert (tmp_path / "m.onnx.data").stat().st_size == 4096  # only the weight, no stale bytes

    feeds = {"x": graphs.random_input((2, 32)), "idx": np.array([0, 5, 299], np.int64)}
    expected = graphs.run(model, feeds)
    reloaded = load_model(tmp_path / "m.onnx")
    assert reloaded.SerializeToString() == before
    for got, want in zip(graphs.run(reloaded, feeds), expected):
        np.testing.assert_array_equal(got, want)


def test_external_save_is_deterministic_and_switches_back_to_one_file(tmp_path):
    model = weights_model()
    save_model(model, tmp_path / "m.onnx", external_threshold_bytes=100)
    first = [(tmp_path / name).read_bytes() for name in ("m.onnx", "m.onnx.data")]
    save_model(model, tmp_path / "m.onnx", external_threshold_bytes=100)
    assert first == [(tmp_path / name).read_bytes() for name in ("m.onnx", "m.onnx.data")]
    assert save_model(model, tmp_path / "m.onnx") == [tmp_path / "m.onnx"]
    assert not (tmp_path / "m.onnx.data").exists(), "a stale data file must not stay behind"
