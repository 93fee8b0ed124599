"""promote_outputs: which tensors become outputs, their types and names, errors, and ORT numerics."""

from __future__ import annotations

import logging
import re

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.graph.promote import MANY_OUTPUTS_WARNING, promote_outputs
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.inputs import generate_inputs

LAYERNORM_NODES = ".*/LayerNorm/.*"
ORIGINAL_OUTPUTS = ["last_hidden_state", "pooler_output"]
POW = "/embeddings/LayerNorm/Pow_output_0"


@pytest.fixture(scope="module")
def transformer():
    return builtin_model("transformer")


@pytest.fixture
def transformer_path(transformer, tmp_path):
    path = tmp_path / "transformer.onnx"
    save_model(transformer, path)
    return path


def transformer_feeds(model):
    return generate_inputs(model, BUILTIN_INPUT_SPECS["transformer"], seed=0, iterations=1)[0]


def run_named(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, feeds)))


def output_names(path) -> list[str]:
    return [value.name for value in load_model(path).graph.output]


def test_regex_on_nodes_promotes_exactly_their_outputs_and_ort_agrees(transformer, transformer_path, tmp_path):
    dst = tmp_path / "promoted.onnx"
    report = promote_outputs(transformer_path, dst, nodes=[LAYERNORM_NODES], match="regex")

    expected = [
        tensor
        for node in transformer.graph.node
        if re.fullmatch(LAYERNORM_NODES, node.name)
        for tensor in node.output
        if tensor not in ORIGINAL_OUTPUTS
    ]
    promoted_model = load_model(dst)
    onnx.checker.check_model(promoted_model, full_check=True)
    names = output_names(dst)
    assert names[:2] == ORIGINAL_OUTPUTS
    assert set(names[2:]) == set(expected) and len(names) == 2 + len(expected)
    assert names[2:] == expected  # node order, which ONNX requires to be topological
    assert [entry["tensor"] for entry in report["promoted"]] == expected
    assert all(entry["output_name"] == entry["tensor"] for entry in report["promoted"])  # FP32: no Cast
    assert report["already_outputs"] == ["last_hidden_state"]  # the last LayerNorm's Add_1
    assert not set(expected) & {value.name for value in promoted_model.graph.value_info}

    # Reference: the original graph with the same tensors listed as (untyped) outputs, run by ORT.
    feeds = transformer_feeds(transformer)
    reference_model = onnx.ModelProto.FromString(transformer.SerializeToString())
    reference_model.graph.output.extend(onnx.ValueInfoProto(name=name) for name in expected)
    reference = run_named(reference_model, feeds, ORIGINAL_OUTPUTS + expected)
    got = run_named(promoted_model, feeds, names)
    for name in names:
        np.testing.assert_array_equal(got[name], reference[name], err_msg=name)


def test_exact_tensor_name_and_existing_output_is_not_duplicated(transformer_path, tmp_path):
    dst = tmp_path / "promoted.onnx"
    report = promote_outputs(transformer_path, dst, tensors=[POW, "pooler_output"])
    assert output_names(dst) == ORIGINAL_OUTPUTS + [POW]
    assert report["promoted"] == [
        {
            "tensor": POW,
            "output_name": POW,
            "producer_node": "/embeddings/LayerNorm/Pow",
            "dtype": "float32",
            "output_dtype": "float32",
        }
    ]
    assert report["already_outputs"] == ["pooler_output"]
    output = load_model(dst).graph.output[2]
    assert output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim][-1] == 64


def test_exact_node_name_promotes_all_its_outputs(transformer_path, tmp_path):
    dst = tmp_path / "promoted.onnx"
    promote_outputs(transformer_path, dst, nodes=["/embeddings/LayerNorm/Sqrt"])
    assert output_names(dst) == ORIGINAL_OUTPUTS + ["/embeddings/LayerNorm/Sqrt_output_0"]


@pytest.mark.parametrize(
    "kwargs, closest",
    [
        ({"tensors": ["/embeddings/LayerNorm/Pow_output"]}, POW),
        ({"nodes": ["/embeddings/LayerNorm/Sqrtt"]}, "/embeddings/LayerNorm/Sqrt"),
        ({"nodes": ["/embeddings/LayerNorm/Sqrt_[0-9]"], "match": "regex"}, "/embeddings/LayerNorm/Sqrt"),
    ],
)
def test_unmatched_pattern_is_one_line_error_with_closest_names(transformer_path, tmp_path, kwargs, closest):
    pattern = (kwargs.get("tensors") or kwargs["nodes"])[0]
    with pytest.raises(UserError) as caught:
        promote_outputs(transformer_path, tmp_path / "out.onnx", **kwargs)
    message = str(caught.value)
    assert "\n" not in message and repr(pattern) in message and repr(closest) in message
    assert message.count(", '") == 2  # three suggestions
    assert not (tmp_path / "out.onnx").exists()


def test_regex_is_a_full_match(transformer_path, tmp_path):
    with pytest.raises(UserError, match="matches no node"):
        promote_outputs(transformer_path, tmp_path / "out.onnx", nodes=["LayerNorm"], match="regex")


def test_invalid_regex_names_the_pattern(transformer_path, tmp_path):
    with pytest.raises(UserError, match=re.escape("'/embeddings/(LayerNorm'")):
        promote_outputs(transformer_path, tmp_path / "out.onnx", tensors=["/embeddings/(LayerNorm"], match="regex")


@pytest.mark.parametrize(
    "name, kind", [("input_ids", "a graph input"), ("embeddings.word_embeddings.weight", "an initializer")]
)
def test_inputs_and_initializers_named_exactly_are_refused(transformer_path, tmp_path, name, kind):
    with pytest.raises(UserError, match=f"{re.escape(repr(name))} is {kind}, not computed by the model"):
        promote_outputs(transformer_path, tmp_path / "out.onnx", tensors=[name])


def test_regex_never_promotes_inputs_or_initializers(transformer, transformer_path, tmp_path):
    dst = tmp_path / "promoted.onnx"
    promote_outputs(transformer_path, dst, tensors=[".*"], match="regex", warn_above=10_000)
    not_computed = {value.name for value in transformer.graph.input} | {t.name for t in transformer.graph.initializer}
    assert not not_computed & set(output_names(dst))
    with pytest.raises(UserError, match="matches no tensor"):
        promote_outputs(transformer_path, tmp_path / "out.onnx", tensors=["input_ids"], match="regex")


def fp16_graph(extra_tensor_named_like_the_cast: bool = False) -> onnx.ModelProto:
    """y = x*x + x in FP16, with a stale FP32 value_info for the square."""
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["square"], name="/Mul"),
        helper.make_node("Add", ["square", "x"], ["y"], name="/Add"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])]
    if extra_tensor_named_like_the_cast:
        nodes.append(helper.make_node("Relu", ["x"], ["square__fp32"], name="/Relu"))
        outputs.append(helper.make_tensor_value_info("square__fp32", TensorProto.FLOAT16, [2, 3]))
    model = graphs.make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])], outputs)
    model.graph.value_info.append(helper.make_tensor_value_info("square", TensorProto.FLOAT, [7]))  # stale
    return model


def test_fp16_tensor_is_exposed_through_a_cast_and_the_report_maps_it(tmp_path):
    src, dst = tmp_path / "fp16.onnx", tmp_path / "promoted.onnx"
    save_model(fp16_graph(), src)
    report = promote_outputs(src, dst, tensors=["square"], as_type="fp32")

    model = load_model(dst)
    onnx.checker.check_model(model, full_check=True)
    assert report["promoted"] == [
        {"tensor": "square", "output_name": "square__fp32", "producer_node": "/Mul",
         "dtype": "float16", "output_dtype": "float32"}
    ]
    cast = model.graph.node[-1]
    assert (cast.op_type, list(cast.input), list(cast.output)) == ("Cast", ["square"], ["square__fp32"])
    assert helper.get_attribute_value(cast.attribute[0]) == TensorProto.FLOAT
    output = model.graph.output[1]
    assert (output.name, output.type.tensor_type.elem_type) == ("square__fp32", TensorProto.FLOAT)
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [2, 3]
    square_info = [v for v in model.graph.value_info if v.name == "square"]
    assert len(square_info) == 1 and square_info[0].type.tensor_type.elem_type == TensorProto.FLOAT16  # stale one gone

    # Squares exact in FP16: ORT's CPU runs FP16 Mul in FP32 and may elide the rounding before our Cast.
    x = (np.arange(6, dtype=np.float32).reshape(2, 3) * 4 - 10).astype(np.float16)
    got = run_named(model, {"x": x}, ["y", "square__fp32"])
    assert got["square__fp32"].dtype == np.float32
    np.testing.assert_array_equal(got["square__fp32"], (x * x).astype(np.float32))
    np.testing.assert_array_equal(got["y"], x * x + x)


def test_native_keeps_the_fp16_tensor_as_is_and_strips_its_stale_value_info(tmp_path):
    src, dst = tmp_path / "fp16.onnx", tmp_path / "promoted.onnx"
    save_model(fp16_graph(), src)
    report = promote_outputs(src, dst, tensors=["square"], as_type="native")
    model = load_model(dst)
    onnx.checker.check_model(model, full_check=True)
    assert report["promoted"][0]["output_name"] == "square" and report["promoted"][0]["output_dtype"] == "float16"
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]
    assert model.graph.output[1].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert "square" not in {value.name for value in model.graph.value_info}


def test_cast_output_name_avoids_a_taken_name(tmp_path):
    src, dst = tmp_path / "fp16.onnx", tmp_path / "promoted.onnx"
    save_model(fp16_graph(extra_tensor_named_like_the_cast=True), src)
    report = promote_outputs(src, dst, tensors=["square"])
    assert report["promoted"][0]["output_name"] == "square__fp32_1"
    onnx.checker.check_model(load_model(dst), full_check=True)


def test_warns_above_the_threshold_only(transformer_path, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="trtpipe.graph.promote"):
        quiet = promote_outputs(transformer_path, tmp_path / "a.onnx", nodes=[LAYERNORM_NODES], match="regex",
                                warn_above=1000)
        assert not caplog.records and quiet["warnings"] == []
        loud = promote_outputs(transformer_path, tmp_path / "b.onnx", nodes=[LAYERNORM_NODES], match="regex")
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert MANY_OUTPUTS_WARNING in caplog.records[0].getMessage()
    assert loud["warnings"] == [caplog.records[0].getMessage().removeprefix("promote_outputs: ")]


def test_same_input_same_bytes(transformer_path, tmp_path):
    reports = [
        promote_outputs(transformer_path, tmp_path / run / "promoted.onnx", nodes=[LAYERNORM_NODES], match="regex")
        for run in ("first", "second")
    ]
    assert (tmp_path / "first/promoted.onnx").read_bytes() == (tmp_path / "second/promoted.onnx").read_bytes()
    assert reports[0] == reports[1]


def test_external_data_source_keeps_working(transformer, tmp_path):
    src, dst = tmp_path / "external.onnx", tmp_path / "promoted.onnx"
    assert len(save_model(transformer, src, external_threshold_bytes=0)) == 2
    promote_outputs(src, dst, tensors=[POW])
    model = load_model(dst)
    onnx.checker.check_model(model, full_check=True)
    got = run_named(model, transformer_feeds(transformer), ORIGINAL_OUTPUTS + [POW])
    assert got[POW].shape[-1] == 64 and np.isfinite(got[POW]).all()
