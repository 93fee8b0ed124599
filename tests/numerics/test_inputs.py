"""(f) Sample inputs: seeded generation from specs, and loading `.npz` / Polygraphy JSON."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx import TensorProto, helper
from polygraphy.json import save_json

from tests.validate.graphs import make_model
from trtpipe.errors import UserError
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.numerics.inputs import generate_inputs, load_inputs

SPECS = BUILTIN_INPUT_SPECS["transformer"]


@pytest.fixture(scope="module")
def transformer():
    return builtin_model("transformer")


def dynamic_model():
    """ids [batch, seq] int64 and x [batch, 4] float32, with symbolic batch/seq."""
    return make_model(
        [helper.make_node("Identity", ["ids"], ["ids_out"], name="/ids"),
         helper.make_node("Identity", ["x"], ["x_out"], name="/x")],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("ids_out", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, ["batch", 4])],
    )


def test_generation_is_seeded_and_reproducible(transformer):
    first = generate_inputs(transformer, SPECS, seed=7, iterations=3)
    again = generate_inputs(transformer, SPECS, seed=7, iterations=3)
    other = generate_inputs(transformer, SPECS, seed=8, iterations=3)
    assert len(first) == 3
    for a, b in zip(first, again):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(first[0]["input_ids"], other[0]["input_ids"])
    assert not np.array_equal(first[0]["input_ids"], first[1]["input_ids"])  # iterations differ
    # Changing one input's spec leaves the other input's values alone.
    changed = generate_inputs(transformer, {**SPECS, "attention_mask": {"low": 1, "high": 2}}, seed=7, iterations=1)
    assert np.array_equal(changed[0]["input_ids"], first[0]["input_ids"])
    assert (changed[0]["attention_mask"] == 1).all()


def test_integer_spec_is_respected(transformer):
    feeds = generate_inputs(transformer, {"input_ids": {"low": 5, "high": 9, "dtype": "int64"},
                                          "attention_mask": {"low": 0, "high": 2}}, seed=0, iterations=4)
    ids = np.concatenate([f["input_ids"] for f in feeds])
    assert ids.dtype == np.int64 and ids.shape == (4, 16)
    assert set(np.unique(ids)) == {5, 6, 7, 8}  # high is exclusive
    assert set(np.unique(np.concatenate([f["attention_mask"] for f in feeds]))) == {0, 1}


def test_a_missing_integer_spec_takes_the_range_the_model_states(transformer):
    """The built-in transformer's mask is cast and taken from 1: {0, 1} (issue 30, item 5; an error before)."""
    feeds = generate_inputs(transformer, {"input_ids": SPECS["input_ids"]}, seed=0, iterations=2)
    assert set(np.unique(np.concatenate([f["attention_mask"] for f in feeds]))) == {0, 1}


def test_integer_inputs_the_model_says_nothing_about_are_one_user_error_naming_the_keys():
    from tests.test_cli_integer_ranges import unread_integer_model

    with pytest.raises(UserError, match=r"'a' \(int64\), 'b' \(int64\).*Fix: .*'\+\+data.inputs=\{a:\{low:0,high:2,"
                                        r"dtype:int64\},b:\{low:0,high:2,dtype:int64\}\}'"):
        generate_inputs(unread_integer_model(), {}, seed=0, iterations=1)


def test_float_input_without_spec_defaults_to_unit_range_with_a_note(caplog):
    model = builtin_model("nafnet")
    with caplog.at_level(logging.INFO, logger="trtpipe.numerics.inputs"):
        image = generate_inputs(model, {}, seed=0, iterations=1)[0]["image"]
    assert image.dtype == np.float32 and image.shape == (1, 3, 32, 32)
    assert image.min() >= 0.0 and image.max() < 1.0
    assert "no data.inputs.image spec" in caplog.text


def test_dynamic_dimensions_need_a_shape():
    model = dynamic_model()
    specs = {"ids": {"low": 0, "high": 10}}
    with pytest.raises(UserError, match=r"'ids' has dynamic dimensions \(shape \[batch, seq\]\).*'\+\+data.inputs.ids.shape=\[1,1\]'"):
        generate_inputs(model, specs, seed=0, iterations=1)
    specs = {"ids": {"low": 0, "high": 10, "shape": [2, 5]}, "x": {"low": -1, "high": 1, "shape": [2, 4]}}
    feeds = generate_inputs(model, specs, seed=0, iterations=1)[0]
    assert feeds["ids"].shape == (2, 5) and feeds["x"].shape == (2, 4)
    with pytest.raises(UserError, match="does not fit the model's shape"):
        generate_inputs(model, {**specs, "x": {"low": 0, "high": 1, "shape": [2, 5]}}, seed=0, iterations=1)


def test_bad_specs_are_user_errors(transformer):
    with pytest.raises(UserError, match="not inputs of the model"):
        generate_inputs(transformer, {**SPECS, "input_idz": SPECS["input_ids"]}, seed=0, iterations=1)
    with pytest.raises(UserError, match="dtype is float32 but the model input is int64"):
        generate_inputs(transformer, {**SPECS, "input_ids": {"low": 0, "high": 5, "dtype": "float32"}}, 0, 1)
    with pytest.raises(UserError, match="low 3 >= high 3"):
        generate_inputs(transformer, {**SPECS, "input_ids": {"low": 3, "high": 3}}, 0, 1)


def test_npz_round_trip(transformer, tmp_path):
    feeds = generate_inputs(transformer, SPECS, seed=3, iterations=1)[0]
    path = tmp_path / "inputs.npz"
    np.savez(path, **feeds)
    loaded = load_inputs(path, transformer)
    assert len(loaded) == 1 and all(np.array_equal(loaded[0][k], feeds[k]) for k in feeds)


def test_polygraphy_json_round_trip(transformer, tmp_path):
    feeds = generate_inputs(transformer, SPECS, seed=3, iterations=2)
    path = tmp_path / "inputs.json"
    save_json(feeds, str(path))
    loaded = load_inputs(path, transformer)
    assert len(loaded) == 2 and np.array_equal(loaded[1]["input_ids"], feeds[1]["input_ids"])


def test_loaded_inputs_are_checked(transformer, tmp_path):
    feeds = generate_inputs(transformer, SPECS, seed=3, iterations=1)[0]
    with pytest.raises(UserError, match="does not exist"):
        load_inputs(tmp_path / "nope.npz", transformer)
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable .npz"):
        load_inputs(tmp_path / "garbage.npz", transformer)
    cases = {
        "missing": ({"input_ids": feeds["input_ids"]}, r"no values for model inputs \['attention_mask'\]"),
        "dtype": ({**feeds, "input_ids": feeds["input_ids"].astype(np.int32)}, "is int32, the model expects int64"),
        "shape": ({**feeds, "input_ids": feeds["input_ids"][:, :8]}, r"shape \[1, 8\], the model expects \[1, 16\]"),
        "unknown": ({**feeds, "token_type_ids": feeds["input_ids"]}, "not model inputs"),
    }
    for name, (arrays, message) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **arrays)
        with pytest.raises(UserError, match=message):
            load_inputs(path, transformer)
    (tmp_path / "inputs.txt").write_text("1 2 3")
    with pytest.raises(UserError, match="neither .npz nor .json"):
        load_inputs(tmp_path / "inputs.txt")
