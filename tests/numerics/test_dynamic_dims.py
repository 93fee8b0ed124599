"""One rule for dynamic dimensions (trtpipe/onnxmodel/input_dims.py), applied by every reader of input shapes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel import input_dims
from trtpipe.numerics.inputs import generate_inputs, load_inputs
from trtpipe.precision.network.network import network_from_model
from trtpipe.trt.profiles import checked_profiles, dynamic_inputs

FORMS = {"minus_one": -1, "minus_seven": -7, "zero": 0, "dim_param": "batch", "missing": None}


def relu_model(first) -> onnx.ModelProto:
    """y = Relu(x), x: [first, 4]; `first=None` writes a dim with neither field."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n" if first is None else first, 4])
    if first is None:
        x.type.tensor_type.shape.dim[0].Clear()
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    return graphs.make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])


@pytest.mark.parametrize("form", list(FORMS))
def test_every_exporter_form_is_dynamic_and_a_concrete_shape_fits_it(form):
    value = relu_model(FORMS[form]).graph.input[0]
    assert input_dims.dims(value) == [None, 4]
    assert input_dims.fits([3, 4], input_dims.dims(value)) and not input_dims.fits([3, 5], input_dims.dims(value))
    assert input_dims.labels(value) == (["batch", 4] if form == "dim_param" else ["?", 4])


def test_unknown_rank_is_not_a_scalar():
    unknown = helper.make_tensor_value_info("u", TensorProto.FLOAT, None)
    scalar = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    assert input_dims.dims(unknown) is None and input_dims.is_dynamic(None)
    assert input_dims.dims(scalar) == [] and not input_dims.is_dynamic([])


@pytest.mark.parametrize("form", list(FORMS))
def test_sample_data_with_a_concrete_size_fits_and_runs(form, tmp_path):
    model = relu_model(FORMS[form])
    feeds = generate_inputs(model, {"x": {"shape": [3, 4]}}, seed=0, iterations=1)[0]
    assert feeds["x"].shape == (3, 4) and feeds["x"].dtype == np.float32
    # No low/high given: the default float range, not a demand for one (that would contradict the shape fix).
    assert 0.0 <= feeds["x"].min() and feeds["x"].max() < 1.0
    np.savez(tmp_path / "in.npz", x=feeds["x"])
    assert load_inputs(tmp_path / "in.npz", model)[0]["x"].shape == (3, 4)
    np.testing.assert_array_equal(graphs.run(_runnable(model), feeds)[0], np.maximum(feeds["x"], 0))


def _runnable(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime takes dim_value 0 literally; sanitize writes it as an empty dim (as here)."""
    input_dims.clear_non_positive_io_dims(model)
    return model


@pytest.mark.parametrize("form", list(FORMS))
def test_no_shape_is_an_error_whose_fix_is_a_concrete_override(form):
    with pytest.raises(UserError) as error:
        generate_inputs(relu_model(FORMS[form]), {}, seed=0, iterations=1)
    assert "'++data.inputs.x.shape=[1,4]'" in str(error.value)


@pytest.mark.parametrize("shape", [[0, 4], [-1, 4], [3, 5], [3]])
def test_a_shape_that_does_not_fit_is_refused_with_one_that_does(shape):
    with pytest.raises(UserError, match=r"does not fit .*'\+\+data.inputs.x.shape=\[1,4\]'"):
        generate_inputs(relu_model(-1), {"x": {"shape": shape}}, seed=0, iterations=1)


@pytest.mark.parametrize("form", list(FORMS))
def test_profiles_for_dynamic_dims_are_accepted_and_fixed_ones_kept(form):
    model = relu_model(FORMS[form])
    assert list(dynamic_inputs(model)) == ["x"]
    profile = {"x": {"min": [1, 4], "opt": [2, 4], "max": [8, 4]}}
    assert checked_profiles(model, [profile]) == [profile]
    with pytest.raises(UserError, match=r"fixed at 4"):
        checked_profiles(model, [{"x": {"min": [1, 5], "opt": [2, 5], "max": [8, 5]}}])


def test_missing_profiles_suggest_one_that_is_accepted_when_used():
    model = relu_model(-1)
    with pytest.raises(UserError) as error:
        checked_profiles(model, [])
    assert "'build.profiles=[{x:{min:[1,4],opt:[1,4],max:[1,4]}}]'" in str(error.value)
    assert checked_profiles(model, [{"x": {"min": [1, 4], "opt": [1, 4], "max": [1, 4]}}])


@pytest.mark.parametrize("form", ["minus_one", "zero"])
def test_the_network_never_records_a_non_positive_size(form):
    net = network_from_model(relu_model(FORMS[form]))
    assert net.tensor_shapes["x"] == [None, 4]


def test_no_override_is_offered_where_none_would_work():
    # "x#0" cannot be written as a Hydra dict key, even escaped; an unknown rank has no example to give.
    for value in (helper.make_tensor_value_info("x#0", TensorProto.FLOAT, [-1, 4]),
                  helper.make_tensor_value_info("x:0", TensorProto.FLOAT, None)):
        model = graphs.make_model([helper.make_node("Relu", [value.name], ["y"], name="relu")], [value],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        with pytest.raises(UserError) as error:
            generate_inputs(model, {}, seed=0, iterations=1)
        fix = str(error.value).split("Fix:")[1]
        assert "data.path" in fix and "'" not in fix


def test_placeholder_dim_params_become_independent_dynamic_dims_and_real_names_stay():
    """Paddle2ONNX writes '?' for every unknown dim; TensorRT reads dims sharing a dim_param as one
    size, so [?, 3, ?, ?] tied height to width and the real TensorRT-RTX builder refused ppocr_cls's
    profile min [1,3,48,192] (issue 23, bench/rtx/RTX.md). "batch" is a deliberate equality and stays."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "?", "-1"])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    rewritten = input_dims.clear_non_positive_io_dims(model)
    assert rewritten == ["x[0]", "x[2]", "x[3]", "y[2]", "y[3]"]
    dims = [[(d.HasField("dim_value"), d.dim_param) for d in v.type.tensor_type.shape.dim]
            for v in (model.graph.input[0], model.graph.output[0])]
    assert dims == [[(False, ""), (True, ""), (False, ""), (False, "")],
                    [(False, "batch"), (True, ""), (False, ""), (False, "")]]
    profiles = checked_profiles(model, [{"x": {"min": [1, 3, 48, 192], "opt": [1, 3, 48, 192], "max": [8, 3, 48, 192]}}])
    assert profiles[0]["x"]["max"] == [8, 3, 48, 192]
