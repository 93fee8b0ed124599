"""The FP16/BF16 emulation: it shows the overflow ONNX Runtime hides, rounds like IEEE storage, and is
exact where nothing is low precision."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.validate.graphs import (
    BF16, FP16, FP32, binary_model, large_deviation_input, layernorm_model, make_model, run_ort,
)
from trtpipe.errors import UserError
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.emulated_graph import emulation_from_model
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.inputs import generate_inputs
from trtpipe.numerics.reference import ReferenceRunner
from trtpipe.numerics.rounding import round_to_bf16, round_to_fp16

FP16_MAX = 65504.0


# (a) the reason the emulator exists ------------------------------------------------------------

def test_onnx_runtime_hides_fp16_layernorm_overflow_and_the_emulator_shows_it():
    fp16_model = layernorm_model(norm_type=FP16)
    x = large_deviation_input()
    x32 = x.astype(np.float32)
    centred = x32 - x32.mean(-1, keepdims=True)
    assert (centred**2).max() > 10 * FP16_MAX  # the Pow output cannot be stored in FP16
    reference = run_ort(layernorm_model(norm_type=FP32, io_type=FP32), {"x": x32})[0]
    assert np.isfinite(reference).all() and np.abs(reference).max() > 1.0

    # ONNX Runtime runs the FP16 graph in FP32 internally, with or without its
    # optimisations: the outputs are finite and right, the overflow is missed.
    for optimize in (True, False):
        direct = run_ort(fp16_model, {"x": x}, optimize=optimize)[0]
        assert np.isfinite(direct).all()
        assert np.abs(direct.astype(np.float32) - reference).max() < 1e-2

    emulated = EmulatedRunner(fp16_model, expose_intermediates=True).run({"x": x})
    assert np.isinf(emulated["squared"]).any()  # Pow overflows ...
    assert np.isinf(emulated["variance"]).all()  # ... so every row's variance is inf ...
    assert np.isfinite(emulated["y"]).all() and not emulated["y"].any()  # ... and y collapses to 0
    assert np.abs(emulated["y"] - reference).max() == pytest.approx(np.abs(reference).max())

    # The same graph with the LayerNorm kept in FP32 by Casts around it is fine.
    protected = EmulatedRunner(layernorm_model(norm_type=FP32, io_type=FP16)).run({"x": x})["y"]
    assert np.isfinite(protected).all()
    np.testing.assert_array_equal(protected, round_to_fp16(reference))


def test_emulation_matches_numpy_float16_arithmetic_op_by_op():
    x = large_deviation_input(spread=50.0)  # squares stay below 65504: compare the rounding itself
    emulated = EmulatedRunner(layernorm_model(norm_type=FP16), expose_intermediates=True).run({"x": x})
    mean = x.mean(-1, keepdims=True, dtype=np.float32).astype(np.float16)
    centred = x - mean  # NumPy float16 arithmetic: computed in FP32, rounded to FP16
    np.testing.assert_array_equal(emulated["centred"], centred.astype(np.float32))
    np.testing.assert_array_equal(emulated["squared"], (centred * centred).astype(np.float32))


# (b) rounding ----------------------------------------------------------------------------------

def test_fp16_add_rounds_to_nearest_even_and_overflows_like_numpy():
    a = np.array([65504, 65504, 1, 1, -65504], np.float16)
    b = np.array([16, 15, 2**-11, 3 * 2**-11, -16], np.float16)
    with np.errstate(over="ignore"):
        expected = a + b
    emulated = EmulatedRunner(binary_model("Add", FP16)).run({"a": a, "b": b})["z"]
    assert emulated.dtype == np.float32  # FP16 outputs come back as FP32 holding FP16 values
    np.testing.assert_array_equal(emulated, expected.astype(np.float32))
    assert emulated[0] == np.inf  # 65520 is halfway to 65536: ties to even -> overflow
    assert emulated[1] == FP16_MAX
    assert emulated[2] == 1.0  # 1 + 2^-11 is a tie: the even neighbour is 1
    assert emulated[3] == 1 + 2**-9
    assert emulated[4] == -np.inf


def bf16_edge_values() -> np.ndarray:
    specials = [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4e38, -3.3895e38, 1e-40, 0.0, -0.0,
                np.inf, -np.inf, np.nan]
    random = np.random.RandomState(3).standard_normal(1000) * 10.0 ** np.random.RandomState(4).uniform(-30, 30, 1000)
    return np.concatenate([np.array(specials), random]).astype(np.float32)


def test_bf16_reference_rounding_is_round_to_nearest_even():
    values = bf16_edge_values()
    ours = round_to_bf16(values)
    independent = values.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(ours, independent)  # NaN == NaN for assert_array_equal
    assert ours[0] == 1.0 and ours[1] == 1 + 2**-6 and ours[2] == 1 + 2**-7
    assert ours[3] == np.inf  # beyond the largest BF16 value after rounding


def test_bf16_tensors_are_rounded_like_the_numpy_reference():
    values = bf16_edge_values()
    scale = numpy_helper.from_array(np.array(3.0, ml_dtypes.bfloat16), "scale")
    model = make_model(
        [helper.make_node("Cast", ["x"], ["x_bf16"], name="/Cast", to=BF16),
         helper.make_node("Mul", ["x_bf16", "scale"], ["y"], name="/Mul")],
        [helper.make_tensor_value_info("x", FP32, [values.size])],
        [helper.make_tensor_value_info("y", BF16, [values.size])],
        [scale],
    )
    result = EmulatedRunner(model, expose_intermediates=True).run({"x": values})
    np.testing.assert_array_equal(result["x_bf16"], round_to_bf16(values))
    with np.errstate(over="ignore", invalid="ignore"):
        expected = round_to_bf16(round_to_bf16(values) * np.float32(3.0))
    np.testing.assert_array_equal(result["y"], expected)


# (c) nothing low precision: exactly the reference -------------------------------------------------

@pytest.mark.parametrize("name", ["transformer", "nafnet"])
def test_emulating_an_fp32_model_is_exactly_the_reference(name):
    model = builtin_model(name)
    before = model.SerializeToString()
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS[name], seed=0, iterations=1)[0]
    emulated = EmulatedRunner(model, expose_intermediates=True)
    reference = ReferenceRunner(model, expose_intermediates=True).run(feeds)
    result = emulated.run(feeds)
    assert [n.op_type for n in emulated.emulation.model.graph.node] == [n.op_type for n in model.graph.node]
    assert result.keys() == reference.keys() and len(result) > 50
    for tensor, value in reference.items():
        np.testing.assert_array_equal(result[tensor], value, err_msg=tensor)
    assert model.SerializeToString() == before  # exposing intermediates worked on copies


# the rest of the contract ------------------------------------------------------------------------

def test_mixed_precision_model_every_fp16_tensor_holds_fp16_values():
    model = builtin_model("mixed_precision")
    before = model.SerializeToString()
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS["mixed_precision"], seed=1, iterations=1)[0]
    runner = EmulatedRunner(model, expose_intermediates=True)
    result = runner.run(feeds)
    assert model.SerializeToString() == before
    assert runner.notes == []
    fp16_tensors = [name for name in result if runner.precisions.get(name) == "fp16"]
    assert len(fp16_tensors) >= 10
    for name in fp16_tensors:
        np.testing.assert_array_equal(result[name], round_to_fp16(result[name]), err_msg=name)
    # Exposing intermediates changes neither the graph outputs nor their values.
    np.testing.assert_array_equal(EmulatedRunner(model).run(feeds)["y"], result["y"])
    assert runner.producers["/block0/norm/Pow_output_0"] == ("/block0/norm/Pow", "Pow")


def test_casts_become_rounding_pairs_or_identity():
    model = make_model(
        [helper.make_node("Cast", ["x"], ["h"], name="/to_half", to=FP16),
         helper.make_node("Cast", ["h"], ["f"], name="/to_float", to=FP32),
         helper.make_node("CastLike", ["f", "h"], ["h2"], name="/like_half"),
         helper.make_node("Add", ["h2", "h"], ["y"], name="/Add")],
        [helper.make_tensor_value_info("x", FP32, [3])],
        [helper.make_tensor_value_info("y", FP16, [3])],
    )
    runner = EmulatedRunner(model, expose_intermediates=True)
    ops = [(n.name, n.op_type) for n in runner.emulation.model.graph.node]
    assert ("/to_float", "Identity") in ops
    assert ("/like_half", "Cast") in ops
    result = runner.run({"x": np.array([40000.0, 1 + 2**-11, 3.0], np.float32)})
    np.testing.assert_array_equal(result["h"], [40000.0, 1.0, 3.0])
    np.testing.assert_array_equal(result["y"], [np.inf, 2.0, 6.0])  # 80000 overflows on storage


def test_fp16_inputs_initializers_and_constants_keep_their_values():
    model = make_model(
        [helper.make_node("Constant", [], ["c"], name="/Constant",
                          value=numpy_helper.from_array(np.array([0.1], np.float16))),
         helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="/ConstantOfShape",
                          value=numpy_helper.from_array(np.array([0.3], np.float16))),
         helper.make_node("Mul", ["x", "w"], ["xw"], name="/Mul"),
         helper.make_node("Add", ["xw", "c"], ["sum"], name="/Add"),
         helper.make_node("Add", ["sum", "filled"], ["y"], name="/Add_1")],
        [helper.make_tensor_value_info("x", FP16, [2])],
        [helper.make_tensor_value_info("y", FP16, [2])],
        [numpy_helper.from_array(np.array([0.7, 3.0], np.float16), "w"),
         numpy_helper.from_array(np.array([2], np.int64), "shape")],
    )
    runner = EmulatedRunner(model, expose_intermediates=True)
    x = np.array([1.1, 2.2], np.float16)
    result = runner.run({"x": x})
    w, c, filled = np.float16([0.7, 3.0]), np.float16(0.1), np.float16(0.3)
    np.testing.assert_array_equal(result["c"], [np.float32(c)])
    np.testing.assert_array_equal(result["filled"], [np.float32(filled)] * 2)
    np.testing.assert_array_equal(result["y"], (x * w + c + filled).astype(np.float32))
    # An FP32 feed for an FP16 input is rounded on the way in, as feeding the engine would.
    np.testing.assert_array_equal(runner.run({"x": x.astype(np.float32) + 1e-4})["y"], result["y"])


def test_untyped_tensors_are_typed_from_the_schema_or_treated_as_fp32_and_recorded():
    # Nothing can type the custom op's output, nor the Relu that reads it;
    # the Shape after them is tensor(int64) by its schema.
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Opaque", ["x"], ["t"], name="/Opaque", domain="my.ops"),
             helper.make_node("Relu", ["t"], ["r"], name="/Relu"),
             helper.make_node("Shape", ["r"], ["s"], name="/Shape")],
            "g", [helper.make_tensor_value_info("x", FP32, [2])], [onnx.ValueInfoProto(name="s")],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)], ir_version=8,
    )
    emulation = emulation_from_model(model)
    assert emulation.precisions["s"] == "int64"
    assert "t" not in emulation.precisions and "r" not in emulation.precisions
    assert any(note.startswith("type of r unknown, treated as FP32") for note in emulation.notes)
    assert emulation.float_tensors == ["t", "r"]  # exposed for localisation, as FP32


def test_unsupported_models_are_refused_with_a_fix():
    custom = helper.make_model(
        helper.make_graph(
            [helper.make_node("FancyNorm", ["x"], ["y"], name="/FancyNorm", domain="my.ops")],
            "g", [helper.make_tensor_value_info("x", FP16, [2])], [helper.make_tensor_value_info("y", FP16, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)], ir_version=8,
    )
    with pytest.raises(UserError, match="/FancyNorm.*Fix: keep this node in FP32"):
        EmulatedRunner(custom)
    fp8 = make_model(
        [helper.make_node("Cast", ["x"], ["q"], name="/q", to=TensorProto.FLOAT8E4M3FN),
         helper.make_node("Cast", ["q"], ["y"], name="/dq", to=FP32)],
        [helper.make_tensor_value_info("x", FP32, [2])], [helper.make_tensor_value_info("y", FP32, [2])],
        opset=19,
    )
    with pytest.raises(UserError, match="fp8e4m3fn"):
        EmulatedRunner(fp8)


def test_bf16_inputs_are_fed_as_fp32_and_rounded_at_entry():
    model = binary_model("Add", BF16, shape=(3,))
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3e38], np.float32)
    result = EmulatedRunner(model).run({"a": x, "b": x})["z"]
    np.testing.assert_array_equal(result, [2.0, 2 + 2**-5, np.inf])


def test_subgraphs_are_rewritten_too():
    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x", "x"], [out], name=f"/{op}")], op, [],
                                 [helper.make_tensor_value_info(out, FP16, [2])])

    model = make_model(
        [helper.make_node("If", ["c"], ["y"], name="/If", then_branch=branch("Mul", "t"),
                          else_branch=branch("Add", "e"))],
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", FP16, [2])],
        [helper.make_tensor_value_info("y", FP16, [2])],
    )
    runner = EmulatedRunner(model)
    x = np.array([300, 2], np.float16)
    np.testing.assert_array_equal(runner.run({"c": np.array(True), "x": x})["y"], [np.inf, 4.0])  # 90000
    np.testing.assert_array_equal(runner.run({"c": np.array(False), "x": x})["y"], [600.0, 4.0])


def test_feeds_that_do_not_fit_are_user_errors():
    model = builtin_model("transformer")
    runner = ReferenceRunner(model)
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS["transformer"], seed=0, iterations=1)[0]
    with pytest.raises(UserError, match="'input_ids' is int32 but the model expects int64"):
        runner.run({**feeds, "input_ids": feeds["input_ids"].astype(np.int32)})
    with pytest.raises(UserError, match=r"no sample values for model inputs \['attention_mask'\]"):
        runner.run({"input_ids": feeds["input_ids"]})
