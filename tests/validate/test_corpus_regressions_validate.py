"""Defects the corpus run (bench/corpus/corpus.py) found in validate's runners, each pinned by a small graph."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.validate.graphs import FP32, make_model
from trtpipe.errors import TrtpipeGraphError, UserError
from trtpipe.validate.compare import Tolerances, compare_candidate
from trtpipe.numerics.metrics import output_metrics
from trtpipe.numerics.ort_session import OrtSession, ort_reason
from trtpipe.numerics.reference import ReferenceRunner


def _bernoulli_model():
    """Bernoulli at opset 22: ONNX Runtime expands it to RandomUniformLike(22), which it lacks."""
    return make_model(
        [helper.make_node("Bernoulli", ["x"], ["y"], name="coin")],
        [helper.make_tensor_value_info("x", FP32, [4])], [helper.make_tensor_value_info("y", FP32, [4])],
        opset=22,
    )


def test_a_model_onnx_runtime_cannot_load_is_a_user_error_naming_its_reason():
    # Corpus: test_bernoulli*, and every model at an IR version newer than ONNX Runtime's,
    # raised ONNX Runtime's own exception out of the precision stage (an internal error).
    with pytest.raises(UserError, match=r"ONNX Runtime [\d.]+ cannot load the model: .*RandomUniformLike") as error:
        ReferenceRunner(_bernoulli_model())
    assert "\n" not in str(error.value) and "onnxruntime_src" not in str(error.value)
    assert "precision.auto.max_abs" in str(error.value)


def test_a_model_onnx_runtime_cannot_run_on_the_inputs_is_a_user_error():
    indices = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
    model = make_model(
        [helper.make_node("Gather", ["table", "i"], ["y"], name="lookup")],
        [indices], [helper.make_tensor_value_info("y", FP32, [1])],
        [helper.make_tensor("table", FP32, [3], [1.0, 2.0, 3.0])],
    )
    runner = ReferenceRunner(model)
    with pytest.raises(UserError, match="ONNX Runtime [\\d.]+ cannot run the model: .*out of data bounds") as error:
        runner.run({"i": np.array([7], np.int64)})
    assert "data.inputs" in str(error.value)


def test_a_graph_trtpipe_built_fails_as_trtpipe_s_own_graph():
    # Not the user's model (the emulation): a failure there is trtpipe's, not a user error, and says so.
    with pytest.raises(TrtpipeGraphError, match=r"cannot load trtpipe's own graph \(the emulation\), not the model") \
            as error:
        OrtSession(_bernoulli_model(), graph="the emulation")
    assert not isinstance(error.value, UserError)


def test_ort_reason_drops_the_code_prefix_and_the_cpp_location():
    error = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
        "onnxruntime::Model::Model(onnx::ModelProto&&, const Logger&) Unsupported model IR version: 14, "
        "max supported IR version: 13\n"
    )
    assert ort_reason(error) == "Unsupported model IR version: 14, max supported IR version: 13"


def test_sequence_outputs_are_compared_element_by_element():
    # Corpus: test_split_to_sequence_2 crashed the comparator (np.asarray of ragged tensors).
    reference = [{"seq": [np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)]}]
    same = [{"seq": [np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)]}]
    off = [{"seq": [np.ones((2, 3), np.float32), np.full((1, 3), 1.5, np.float32)]}]
    ragged = [{"seq": [np.ones((3, 3), np.float32)]}]
    assert compare_candidate("emulated", reference, same, ["seq"]).passed
    verdict = compare_candidate("emulated", reference, off, ["seq"], Tolerances.from_mapping({"max_abs": 0.1}))
    assert not verdict.passed and verdict.outputs["seq"].metrics.max_abs == pytest.approx(0.5)
    assert "shape [[3, 3]] differs from the reference's [[2, 3], [1, 3]]" in compare_candidate(
        "emulated", reference, ragged, ["seq"]).reasons[0]


def test_string_outputs_are_judged_by_equality():
    reference = [{"s": np.array(["a", "b"], dtype=object)}]
    assert compare_candidate("emulated", reference, [{"s": np.array(["a", "b"], dtype=object)}], ["s"]).passed
    assert not compare_candidate("emulated", reference, [{"s": np.array(["a", "c"], dtype=object)}], ["s"]).passed


@pytest.mark.parametrize("reference, candidate", [
    (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)),  # test_split_zero_size_splits_*
    (np.full((2,), -np.inf, np.float32), np.full((2,), -np.inf, np.float32)),  # test_reduce_max_empty_set
])
def test_outputs_with_nothing_to_judge_pass(reference, candidate):
    # Corpus: every empty output failed validation as "cosine is NaN (undefined)".
    metrics = output_metrics(reference, candidate)
    assert (metrics.max_abs, metrics.cosine, metrics.nonfinite) == (0.0, 1.0, 0)
    assert compare_candidate("emulated", [{"y": reference}], [{"y": candidate}], ["y"]).passed


def test_a_bfloat16_input_onnx_runtime_cannot_take_gets_a_fix_that_is_not_the_inputs():
    # Corpus: test_castlike_BFLOAT16_to_FLOAT and 91 more: "Numpy_type 23 can't be converted to
    # MLDataType. Fix: check that the sample inputs ... are valid" (they were).
    import ml_dtypes

    model = make_model([helper.make_node("Cast", ["x"], ["y"], name="up", to=FP32)],
                       [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
                       [helper.make_tensor_value_info("y", FP32, [2])])
    with pytest.raises(UserError, match="Python API takes no bfloat16") as error:
        ReferenceRunner(model).run({"x": np.ones(2, ml_dtypes.bfloat16)})
    assert "check that the sample inputs" not in str(error.value)
