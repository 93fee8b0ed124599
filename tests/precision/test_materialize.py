"""materialize(): structure (types, Cast counts, names) and numerics (ONNX Runtime) of the result."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.precision.graphs import (
    casts,
    element_types,
    lossless_round_trips,
    make_model,
    mlp,
    plan,
    reference_bfloat16_bits,
    run,
    sample_feeds,
    stacked_blocks,
    value,
    weight,
)
from trtpipe.errors import UserError
from trtpipe.models import builtin_model
from trtpipe.precision.materialize.materialize import materialize, name_unnamed_nodes
from trtpipe.precision.materialize.weights import bfloat16_bits

FP16, FP32 = TensorProto.FLOAT16, TensorProto.FLOAT


def checked(model, node_precision, **options):
    """Materialise, then insist on the full checker and an ONNX Runtime session that runs."""
    result, report = materialize(model, node_precision, **options)
    onnx.checker.check_model(result, full_check=True)
    outputs = run(result, sample_feeds(result))
    assert all(np.isfinite(output).all() for output in outputs if output.dtype.kind == "f")
    json.dumps(report)
    return result, report


def test_all_fp16_mlp_casts_only_at_the_boundary_and_stays_accurate():
    model = mlp()
    result, report = checked(model, plan(model, "fp16"))

    assert [(c.input[0], c.output[0]) for c in casts(result)] == [("x", "x/cast_to_fp16"), ("y/fp16", "y")]
    assert report["casts_added"]["count"] == 2
    assert all(tensor.data_type == FP16 for tensor in result.graph.initializer)
    assert sorted(report["initializers_converted"]) == ["b1", "w1", "w2"]
    assert result.graph.input[0].type.tensor_type.elem_type == FP32
    assert result.graph.output[0].type.tensor_type.elem_type == FP32
    feeds = sample_feeds(model)
    np.testing.assert_allclose(run(result, feeds)[0], run(model, feeds)[0], rtol=1e-2, atol=1e-2)


def test_one_fp32_node_in_the_middle_costs_exactly_two_casts():
    model = mlp()
    result, report = checked(model, plan(model, "fp16", **{"/Relu": "fp32"}))

    assert report["casts_added"]["count"] == 4
    relu = next(node for node in result.graph.node if node.name == "/Relu")
    assert relu.input[0] == "h2/cast_to_fp32" and relu.output[0] == "h3"
    assert {c.input[0] for c in casts(result)} == {"x", "h2", "h3", "y/fp16"}
    assert lossless_round_trips(result) == []


def test_consumers_needing_the_same_type_share_one_cast():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/Relu"),
        helper.make_node("Sigmoid", ["a"], ["s"], name="/Sigmoid"),
        helper.make_node("Tanh", ["a"], ["t"], name="/Tanh"),
        helper.make_node("Add", ["s", "t"], ["y"], name="/Add"),
    ]
    model = make_model(nodes, [value("x", [4])], [value("y", [4])])
    node_precision = plan(model, "fp32", **{"/Relu": "fp16"})
    result, report = checked(model, node_precision)

    shared = [c for c in report["casts_added"]["casts"] if c["tensor"] == "a"]
    assert len(shared) == 1 and shared[0]["consumers"] == ["/Sigmoid", "/Tanh"]
    assert report["casts_added"]["count"] == 2  # x -> fp16, a -> fp32


def test_an_authors_cast_to_the_needed_type_is_reused_even_when_it_comes_later():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/Relu"),
        helper.make_node("Tanh", ["a"], ["t"], name="/Tanh"),  # reads `a` before the author's Cast
        helper.make_node("Cast", ["a"], ["a32"], name="/Cast", to=FP32),
        helper.make_node("Sigmoid", ["a32"], ["s"], name="/Sigmoid"),
        helper.make_node("Add", ["s", "t"], ["y"], name="/Add"),
    ]
    model = make_model(nodes, [value("x", [4])], [value("y", [4])])
    result, report = checked(model, plan(model, "fp32", **{"/Relu": "fp16"}))

    assert report["casts_added"]["count"] == 1  # x -> fp16 only
    assert report["casts_reused"] == [{"cast": "/Cast", "tensor": "a", "to": "fp32", "consumers": ["/Tanh"]}]
    order = [node.name for node in result.graph.node]
    assert order.index("/Cast") < order.index("/Tanh")


def test_a_weight_needed_in_two_types_is_stored_once_per_type():
    bias = numpy_helper.from_array(np.full([4], 0.5, np.float32), "bias")
    nodes = [
        helper.make_node("Constant", [], ["c"], name="/Constant", value_float=2.0),
        helper.make_node("Add", ["x", "bias"], ["a"], name="/low/Add"),
        helper.make_node("Mul", ["a", "c"], ["m"], name="/low/Mul"),
        helper.make_node("Add", ["m", "bias"], ["b"], name="/high/Add"),
        helper.make_node("Mul", ["b", "c"], ["y"], name="/high/Mul"),
    ]
    model = make_model(nodes, [value("x", [4])], [value("y", [4])], [bias])
    node_precision = plan(model, "fp16", **{"/high/Add": "fp32", "/high/Mul": "fp32"})
    result, report = checked(model, node_precision)

    types = element_types(result)
    # The authored type keeps the name; the other type is a copy named after it.
    assert (types["bias"], types["bias/fp16"]) == (FP32, FP16)
    assert (types["c"], types["c/fp16"]) == (FP32, FP16)
    assert report["initializers_converted"] == ["bias/fp16"]
    assert report["constants_converted"] == ["c/fp16"]
    assert not any(c.input[0] in ("bias", "c") for c in casts(result))
    feeds = sample_feeds(model)
    np.testing.assert_allclose(run(result, feeds)[0], run(model, feeds)[0], rtol=1e-2, atol=1e-2)


def test_kept_author_casts_never_get_a_lossless_round_trip_around_them():
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], name="/in", to=FP16),
        helper.make_node("Relu", ["h"], ["a"], name="/Relu"),
        helper.make_node("Cast", ["a"], ["b"], name="/up", to=FP32),
        helper.make_node("Sigmoid", ["b"], ["s"], name="/Sigmoid"),
        helper.make_node("Cast", ["s"], ["y"], name="/down", to=FP16),
    ]
    model = make_model(nodes, [value("x", [4])], [value("y", [4], FP16)])
    node_precision = plan(model, "keep", **{"/Relu": "fp32", "/Sigmoid": "fp16"})
    result, report = checked(model, node_precision)

    inputs = {node.name: node.input[0] for node in result.graph.node}
    assert inputs["/up"] == "a/cast_to_fp16"  # a kept Cast reads the type it was written for
    assert inputs["/Sigmoid"] == "a/cast_to_fp16"  # not Cast(b, fp16): b is a lossless Cast of it
    assert inputs["/down"] == "s"  # fp16 already: no FP16 -> FP32 in front of the author's Cast
    assert lossless_round_trips(result) == []
    assert report["casts_added"]["count"] == 2  # h -> fp32 for the Relu, a -> fp16 for /up


def test_without_keep_io_types_graph_io_becomes_fp16_and_no_cast_is_added():
    model = mlp()
    result, report = checked(model, plan(model, "fp16"), keep_io_types=False)

    assert casts(result) == [] and report["casts_added"]["count"] == 0
    assert result.graph.input[0].type.tensor_type.elem_type == FP16
    assert result.graph.output[0].type.tensor_type.elem_type == FP16
    assert report["graph_io"] == {"keep_io_types": False, "inputs": {"x": "fp16"}, "outputs": {"y": "fp16"}}


def test_resize_scales_stay_fp32_while_its_data_is_fp16():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
        helper.make_node("Resize", ["r", "", "scales"], ["y"], name="/Resize", mode="nearest"),
    ]
    model = make_model(nodes, [value("x", [1, 2, 3, 3])], [value("y", [1, 2, 6, 6])], [scales])
    result, report = checked(model, plan(model, "fp16"))

    types = element_types(result)
    resize = next(node for node in result.graph.node if node.name == "/Resize")
    assert types[resize.input[0]] == FP16 and types[resize.input[2]] == FP32
    assert report["initializers_converted"] == []
    kept = report["kept_fp32_inputs"]
    assert [(k["node"], k["input"], k["type"]) for k in kept] == [("/Resize", 2, "fp32")]
    assert "tensor(float) in the schema" in kept[0]["reason"]


def test_integer_shape_path_is_untouched():
    shape_tensors = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="/Gather"),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"], name="/Unsqueeze"),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="/Reshape"),
        helper.make_node("Relu", ["flat"], ["y"], name="/Relu"),
    ]
    model = make_model(nodes, [value("x", [2, 3, 4])], [value("y", [2, 12])], shape_tensors)
    before = element_types(model)
    result, report = checked(model, plan(model, "fp16"))

    after = element_types(result)
    for name in ["shape", "batch", "batch_1d", "target", "zero", "axes", "minus_one"]:
        assert after[name] == before[name] == TensorProto.INT64
    assert after["flat"] == FP16
    assert {c.input[0] for c in casts(result)} == {"x", "y/fp16"}


def test_an_fp32_body_node_reading_a_retyped_outer_tensor_casts_it_inside_its_body():
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["o"], name="/then/Neg")], "then", [],
                               [value("o", [4])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/Relu"),
        helper.make_node("If", ["cond"], ["r"], name="/If", then_branch=branch, else_branch=branch),
    ]
    cond = numpy_helper.from_array(np.array(True), "cond")
    model = make_model(nodes, [value("x", [4])], [value("r", [4])], [cond])
    body_fp32 = {"/If/else_branch//then/Neg": "fp32", "/If/then_branch//then/Neg": "fp32"}
    result, report = checked(model, plan(model, "fp16", **body_fp32))

    if_node = next(node for node in result.graph.node if node.op_type == "If")
    for attribute in if_node.attribute:
        cast, neg = attribute.g.node
        assert cast.op_type == "Cast" and cast.input[0] == "a" and neg.input[0] == cast.output[0]
    assert element_types(result)["a"] == FP16
    assert not report["precision_not_applied"]  # the If keeps its own types: the plan, not a failure


def test_an_initializer_beyond_fp16_range_is_saturated_and_reported():
    big = numpy_helper.from_array(np.array([1e6, -3.0, 2.0, -2e5], np.float32), "big")
    nodes = [helper.make_node("Mul", ["x", "big"], ["y"], name="/Mul")]
    model = make_model(nodes, [value("x", [4])], [value("y", [4])], [big])
    result, report = checked(model, plan(model, "fp16"))

    assert report["saturated"] == [
        {"tensor": "big", "source": "big", "to": "fp16", "max_abs": 1e6, "clipped_to": 65504.0}
    ]
    stored = numpy_helper.to_array(result.graph.initializer[0])
    assert stored.dtype == np.float16 and stored.tolist() == [65504.0, -3.0, 2.0, -65504.0]


def test_a_weight_through_transpose_follows_its_consumer_without_a_runtime_cast():
    nodes = [
        helper.make_node("Transpose", ["w"], ["w_t"], name="/Transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "w_t"], ["y"], name="/MatMul"),
    ]
    model = make_model(nodes, [value("x", [2, 8])], [value("y", [2, 4])], [weight("w", [4, 8])])
    # The planner left the Transpose FP32: it is a weight path, so it follows the MatMul.
    result, report = checked(model, plan(model, "fp16", **{"/Transpose": "fp32"}))

    types = element_types(result)
    assert types["w"] == FP16 and types["w_t"] == FP16
    assert not any(c.input[0] in ("w", "w_t") for c in casts(result))
    assert report["weight_chain_nodes"] == [{"node": "/Transpose", "type": "fp16"}]


def test_mixed_precision_model_keeps_author_casts_and_islands_and_converts_the_head():
    model = builtin_model("mixed_precision")
    head = [node.name for node in model.graph.node if node.name.startswith("/head/")]
    assert len(head) == 6  # fc1 MatMul+Add, Relu, fc2 MatMul+Add, residual Add
    node_precision = plan(model, "keep", **{name: "fp16" for name in head})
    result, report = checked(model, node_precision)

    original = {node.name: node for node in model.graph.node}
    materialised = {node.name: node for node in result.graph.node}
    before, after = element_types(model), element_types(result)
    for name, node in original.items():
        if node_precision[name] == "keep":
            assert materialised[name].SerializeToString() == node.SerializeToString(), name
            assert [after[t] for t in node.input] == [before[t] for t in node.input], name
            assert [after[t] for t in node.output] == [before[t] for t in node.output], name
    assert len(casts(model)) == 8 and len(casts(result)) == 9  # the author's 8 + one at the output
    assert {c.name for c in casts(model)} <= {c.name for c in casts(result)}
    # The head reads the block's FP16 result directly instead of FP16 -> FP32 -> FP16.
    assert [x["consumer"] for x in report["casts_looked_through"]] == ["/head/fc1/MatMul", "/head/Add"]
    assert lossless_round_trips(result) == lossless_round_trips(model)  # only the author's own
    assert all(after[name] == FP16 for name in ["head.fc1.weight", "head.fc2.bias"])
    feeds = sample_feeds(model)
    np.testing.assert_allclose(run(result, feeds)[0], run(model, feeds)[0], rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("name, expected_casts", [("transformer", 3), ("nafnet", 2)])
def test_all_fp16_builtin_models_pass_the_full_checker_and_run(name, expected_casts):
    model = builtin_model(name)
    result, report = checked(model, plan(model, "fp16"))
    print(name, "casts added:", report["casts_added"]["count"])
    assert report["casts_added"]["count"] == expected_casts
    assert lossless_round_trips(result) == []


@pytest.mark.parametrize("name", ["transformer", "nafnet", "mlp"])
def test_an_all_fp32_plan_changes_no_type_and_adds_no_cast(name):
    model = mlp() if name == "mlp" else builtin_model(name)
    result, report = checked(model, plan(model, "fp32"))

    assert report["casts_added"]["count"] == 0 and report["initializers_converted"] == []
    assert len(casts(result)) == len(casts(model))
    before, after = element_types(model), element_types(result)
    assert {name: after[name] for name in before} == before
    assert [node.SerializeToString() for node in result.graph.node] == [
        node.SerializeToString() for node in model.graph.node
    ]


def test_bf16_initializer_bits_are_rounded_to_nearest_even():
    ties = [1.00390625, 1.01171875, -1.00390625]  # exactly halfway: round to the even neighbour
    values = np.array(ties + [0.1, -2.5e-3, 3.14159, 1e-40, 65504.0, float("inf"), float("nan")], np.float32)
    assert bfloat16_bits(values).tolist() == [reference_bfloat16_bits(float(v)) for v in values]
    assert bfloat16_bits(np.array(ties, np.float32)).tolist() == [0x3F80, 0x3F82, 0xBF80]

    model = mlp()
    result, report = materialize(model, plan(model, "bf16"))
    onnx.checker.check_model(result, full_check=True)
    for original in model.graph.initializer:
        stored = next(t for t in result.graph.initializer if t.name == original.name)
        assert stored.data_type == TensorProto.BFLOAT16
        expected = [reference_bfloat16_bits(float(v)) for v in numpy_helper.to_array(original).ravel()]
        assert np.frombuffer(stored.raw_data, "<u2").tolist() == expected


def test_a_2000_node_graph_materialises_in_well_under_a_second():
    model = stacked_blocks(700)
    assert len(model.graph.node) >= 2000
    node_precision = plan(model, "fp16")
    node_precision.update({f"/block{index}/Relu": "fp32" for index in range(0, 700, 10)})
    started = time.perf_counter()
    result, report = materialize(model, node_precision)
    seconds = time.perf_counter() - started
    print(f"materialised {len(model.graph.node)} nodes in {seconds:.3f} s, "
          f"{report['casts_added']['count']} casts added")
    assert report["casts_added"]["count"] == 2 + 2 * 70  # x, y, and around each fp32 Relu
    assert seconds < 5.0  # generous: only catches quadratic blow-ups


def test_same_input_gives_the_same_bytes_and_the_input_is_not_modified():
    model = builtin_model("transformer")
    original_bytes = model.SerializeToString()
    node_precision = plan(model, "fp16", **{"/encoder/layer.0/output/LayerNorm/Pow": "fp32"})
    first, first_report = materialize(model, node_precision)
    second, second_report = materialize(model, node_precision)
    assert first.SerializeToString() == second.SerializeToString()
    assert json.dumps(first_report) == json.dumps(second_report)
    assert model.SerializeToString() == original_bytes


def test_unnamed_nodes_are_named_like_tensorrt_and_the_plan_must_cover_every_node():
    model = mlp()
    model.graph.node[2].name = ""
    assert name_unnamed_nodes(model) == ["node_of_h3"]
    model.graph.node[2].name = ""
    node_precision = plan(model, "fp16")
    node_precision["node_of_h3"] = node_precision.pop("")
    result, report = materialize(model, node_precision)
    assert report["nodes_named"] == ["node_of_h3"]
    assert "node_of_h3" in {node.name for node in result.graph.node}

    del node_precision["/fc1/Add"]
    with pytest.raises(UserError, match="no precision for 1 node"):
        materialize(model, node_precision)
    with pytest.raises(UserError, match="does not have"):
        materialize(model, {**plan(model, "fp16"), "node_of_h3": "fp16", "/nope": "fp16"})


def test_pow_exponent_follows_the_base_precision_for_tensorrt():
    """TensorRT's elementwise layer needs both Pow operands in one type (strongly typed)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from trtpipe.precision.materialize.materialize import materialize

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    node = helper.make_node("Pow", ["x", "two"], ["y"], name="square")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [two]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    mixed, _ = materialize(model, {"square": "fp16"})
    onnx.checker.check_model(mixed, full_check=True)
    types = {t.name: t.data_type for t in mixed.graph.initializer}
    assert types["two"] == TensorProto.FLOAT16
    session = onnxruntime.InferenceSession(mixed.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run(None, {"x": np.full((2, 3), 3.0, np.float32)})[0]
    assert np.allclose(out, 9.0)


def test_shape_of_an_fp16_tensor_needs_no_cast():
    """Shape reads any float type: no FP16 -> FP32 Cast in front of it (bench/README.md)."""
    import onnx
    from onnx import TensorProto, helper

    from trtpipe.precision.materialize.materialize import materialize

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu2")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y, s]), ir_version=8,
                              opset_imports=[helper.make_opsetid("", 17)])
    mixed, report = materialize(model, {"relu": "fp16", "shape": "keep", "relu2": "fp16"})
    onnx.checker.check_model(mixed, full_check=True)
    assert report["casts_added"]["count"] == 2  # the graph input and output boundaries only
