"""Sample-input defects the corpus run (bench/corpus/corpus.py) found: messages whose fix could not be
followed (sequence inputs, bfloat16/float8/int4 and string arrays in .npz), pinned by small graphs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.validate.graphs import make_model
from trtpipe.errors import UserError
from trtpipe.numerics.inputs import generate_inputs, load_inputs


def _identity_model(value_info, opset=21):
    out = helper.make_value_info("y", value_info.type)
    return make_model([helper.make_node("Identity", [value_info.name], ["y"], name="id")],
                      [value_info], [out], opset=opset)


def _tensor_model(elem_type, shape=(3,)):
    return _identity_model(helper.make_tensor_value_info("x", elem_type, list(shape)))


def _sequence_model():
    return _identity_model(helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None))


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_a_sequence_input_is_named_as_such_when_loading(tmp_path):
    # Corpus: test_sequence_insert_*: "has no values for model inputs ['sequence']. Fix: add them".
    path = tmp_path / "inputs.npz"
    np.savez(path)
    with pytest.raises(UserError) as error:
        load_inputs(path, _sequence_model())
    assert "model input 'seq' is a sequence, not a tensor" in _one_line(error)


def test_a_sequence_input_is_named_as_such_when_generating():
    # Was a multi-line message holding the TypeProto's repr.
    with pytest.raises(UserError) as error:
        generate_inputs(_sequence_model(), {}, seed=0, iterations=1)
    assert "is a sequence, not a tensor" in _one_line(error)


@pytest.mark.parametrize("elem_type, dtype", [
    (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    (TensorProto.INT4, ml_dtypes.int4),
])
def test_types_npz_writes_as_raw_bytes_are_read_back_bit_for_bit(tmp_path, elem_type, dtype):
    # Corpus: test_cast_BFLOAT16_to_FLOAT and others: "is |V2 ... Fix: save it as bfloat16" (impossible).
    values = np.array([1.5, -2.0, 3.0]).astype(dtype)
    path = tmp_path / "inputs.npz"
    np.savez(path, x=values)
    loaded = load_inputs(path, _tensor_model(elem_type))[0]["x"]
    assert loaded.dtype == np.dtype(dtype)
    assert loaded.tobytes() == values.tobytes()


def test_float8_e5m2_that_numpy_cannot_read_back_says_how_to_save_it(tmp_path):
    values = np.array([1.0, 2.0, -4.0]).astype(ml_dtypes.float8_e5m2)
    path = tmp_path / "inputs.npz"
    np.savez(path, x=values)
    with pytest.raises(UserError) as error:
        load_inputs(path, _tensor_model(TensorProto.FLOAT8E5M2))
    assert "array.view(np.uint8)" in _one_line(error)
    np.savez(path, x=values.view(np.uint8))  # the fix the message gives
    loaded = load_inputs(path, _tensor_model(TensorProto.FLOAT8E5M2))[0]["x"]
    assert loaded.tobytes() == values.tobytes() and loaded.dtype == np.dtype(ml_dtypes.float8_e5m2)


def test_raw_bits_of_another_width_are_refused_with_the_raw_bits_fix(tmp_path):
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.zeros(3, np.uint8))
    with pytest.raises(UserError) as error:
        load_inputs(path, _tensor_model(TensorProto.BFLOAT16))
    assert "raw bits of the same width" in _one_line(error)


def test_string_inputs_are_read_from_text_arrays_and_object_arrays_get_a_followable_fix(tmp_path):
    # Corpus: test_string_concat and others: "Object arrays cannot be loaded ... Fix: write it with numpy.savez".
    model = _tensor_model(TensorProto.STRING, shape=(2,))
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.array(["a", "bc"], dtype=object))
    with pytest.raises(UserError) as error:
        load_inputs(path, model)
    assert "dtype=str" in _one_line(error)
    np.savez(path, x=np.array(["a", "bc"], dtype=str))
    loaded = load_inputs(path, model)[0]["x"]
    assert loaded.dtype == object and list(loaded) == ["a", "bc"]
