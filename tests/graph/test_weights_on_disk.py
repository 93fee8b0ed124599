"""Weights on disk: anchored external tensors read, checked, saved, inferred and run without loading them."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import uses_external_data

from tests.graph import graphs
from trtpipe.errors import UserError
from trtpipe.onnxmodel import value_info, weights_on_disk
from trtpipe.onnxmodel.onnx_io import EXTERNAL_ALIGNMENT_BYTES, load_model, save_model
from trtpipe.graph.sanitize import _load_what_folding_reads, sanitize_model
from trtpipe.onnxmodel.weights_on_disk import (
    copy_span,
    is_on_disk,
    on_disk_span,
    tensor_array,
    tensor_nbytes,
)
from trtpipe.models import BUILTIN_MODELS
from trtpipe.numerics.ort_session import OrtSession

RNG = np.random.default_rng(11)
WEIGHT_NAMES = ("w32", "w16", "w8")


def mixed_weights_model(seed: int = 11) -> onnx.ModelProto:
    """y = x @ w32 + float(w16) + float(w8) + bias: float32, float16 and int8 weights of >= 1 KiB each."""
    rng = np.random.default_rng(seed)
    originals = {
        "w32": rng.standard_normal((32, 32)).astype(np.float32),  # 4 KiB
        "w16": rng.standard_normal((32, 32)).astype(np.float16),  # 2 KiB
        "w8": rng.integers(-128, 128, (32, 32)).astype(np.int8),  # 1 KiB, the smallest that moves out
        "bias": np.linspace(-1, 1, 32).astype(np.float32),  # 128 bytes: stays inline
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w32"], ["mm"], name="/MatMul"),
        helper.make_node("Cast", ["w16"], ["w16f"], name="/Cast16", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["w8"], ["w8f"], name="/Cast8", to=TensorProto.FLOAT),
        helper.make_node("Add", ["mm", "w16f"], ["a1"], name="/Add1"),
        helper.make_node("Add", ["a1", "w8f"], ["a2"], name="/Add2"),
        helper.make_node("Add", ["a2", "bias"], ["y"], name="/Add3"),
    ]
    initializers = [numpy_helper.from_array(array, name) for name, array in originals.items()]
    return graphs.make_model(nodes, [graphs.float_input("x", [32, 32])], [graphs.float_input("y", [32, 32])],
                             initializers)


def original_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}


def saved_external(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    written = save_model(model, folder / name, external_threshold_bytes=0)
    assert written == [folder / name, folder / f"{name}.data"]
    return folder / name


def assert_same_values(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def external_entries(path: Path) -> dict[str, dict[str, str]]:
    """name -> external_data entries of every external tensor as stored in the file."""
    stored = onnx.load(str(path), load_external_data=False)
    return {
        tensor.name: {entry.key: entry.value for entry in tensor.external_data}
        for tensor in stored.graph.initializer
        if uses_external_data(tensor)
    }


# 1. Loading with weights on disk ---------------------------------------------------------------


def test_weights_stay_on_disk_and_read_back_exactly(tmp_path):
    model = mixed_weights_model()
    path = saved_external(model, tmp_path)

    on_disk = load_model(path, weights_on_disk=True)

    by_name = {tensor.name: tensor for tensor in on_disk.graph.initializer}
    for name in WEIGHT_NAMES:
        tensor = by_name[name]
        assert is_on_disk(tensor), name
        assert not tensor.HasField("raw_data") and not tensor.float_data and not tensor.int32_data
        location, offset, _ = on_disk_span(tensor)
        assert location == (tmp_path / "m.onnx.data").resolve() and location.is_absolute()
        assert offset % EXTERNAL_ALIGNMENT_BYTES == 0
    assert not is_on_disk(by_name["bias"]) and by_name["bias"].HasField("raw_data")
    for name, want in original_values(model).items():
        assert_same_values(tensor_array(by_name[name]), want)
    assert {tensor_array(by_name[name]).dtype for name in WEIGHT_NAMES} == {
        np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int8)}


def test_tensor_array_reads_from_the_file_not_a_copy(tmp_path):
    # The value comes from the data file at the time of reading: proof that nothing was loaded.
    path = saved_external(mixed_weights_model(), tmp_path)
    on_disk = load_model(path, weights_on_disk=True)
    w32 = next(t for t in on_disk.graph.initializer if t.name == "w32")
    data_file, offset, _ = on_disk_span(w32)
    with open(data_file, "r+b") as handle:
        handle.seek(offset)
        handle.write(np.full(4, 7.0, np.float32).tobytes())
    assert tensor_array(w32).reshape(-1)[:4].tolist() == [7.0] * 4


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.int4, np.float64, np.uint8])
def test_tensor_array_of_other_weight_types(tmp_path, dtype):
    # bfloat16, float8 and int4 are not plain NumPy types: read through onnx's own decoding.
    values = np.random.default_rng(5).uniform(-7, 7, (45, 51)).astype(dtype)
    tensor = numpy_helper.from_array(values, "w")
    model = graphs.make_model([helper.make_node("Identity", ["w"], ["y"])], [],
                              [helper.make_tensor_value_info("y", tensor.data_type, [45, 51])], [tensor], opset=21,
                              ir_version=10)
    on_disk = load_model(saved_external(model, tmp_path), weights_on_disk=True)
    stored = on_disk.graph.initializer[0]
    assert is_on_disk(stored) and on_disk_span(stored)[2] == tensor_nbytes(tensor)
    got = tensor_array(stored)
    assert got.dtype == values.dtype and got.shape == values.shape and got.tobytes() == values.tobytes()


# 2. Anchoring errors ------------------------------------------------------------------------------


def assert_anchoring_error(path: Path, *texts: str) -> str:
    with pytest.raises(UserError) as caught:
        load_model(path, weights_on_disk=True)
    message = str(caught.value)
    assert "\n" not in message and "Fix:" in message
    for text in texts:
        assert text in message, (text, message)
    return message


def rewrite_location(path: Path, tensor_name: str, location: str) -> None:
    """Edit one tensor's stored `location` entry by hand (what a foreign exporter could write)."""
    stored = onnx.load(str(path), load_external_data=False)
    tensor = next(t for t in stored.graph.initializer if t.name == tensor_name)
    entry = next(e for e in tensor.external_data if e.key == "location")
    entry.value = location
    path.write_bytes(stored.SerializeToString())


def test_missing_data_file_names_file_and_tensor(tmp_path):
    path = saved_external(mixed_weights_model(), tmp_path)
    (tmp_path / "m.onnx.data").unlink()
    message = assert_anchoring_error(path, "m.onnx.data", "'w32'", "does not exist")
    assert str(path) in message


def test_truncated_data_file_names_file_and_tensor(tmp_path):
    path = saved_external(mixed_weights_model(), tmp_path)
    data = tmp_path / "m.onnx.data"
    # w32 at 0 (4096 bytes), w16 at 4096 (2048 bytes), w8 at 8192 (1024 bytes): cut into w16.
    data.write_bytes(data.read_bytes()[:5000])
    assert_anchoring_error(path, "m.onnx.data", "'w16'", "too short", "has 5000")


def test_data_file_one_byte_short_is_refused(tmp_path):
    path = saved_external(mixed_weights_model(), tmp_path)
    data = tmp_path / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:-1])
    assert_anchoring_error(path, "m.onnx.data", "'w8'", "too short")


def test_absolute_location_is_refused(tmp_path):
    path = saved_external(mixed_weights_model(), tmp_path)
    absolute = str((tmp_path / "m.onnx.data").resolve())
    rewrite_location(path, "w16", absolute)
    assert_anchoring_error(path, "'w16'", absolute, "outside the model's directory")


@pytest.mark.parametrize("location", ["../m.onnx.data", "sub/../m.onnx.data"])
def test_location_with_dotdot_is_refused(tmp_path, location):
    path = saved_external(mixed_weights_model(), tmp_path / "model")
    # The named file exists, so only the location's form can be the reason.
    shutil.copy(tmp_path / "model" / "m.onnx.data", tmp_path / "m.onnx.data")
    (tmp_path / "model" / "sub").mkdir()
    rewrite_location(path, "w8", location)
    assert_anchoring_error(path, "'w8'", repr(location))


# 3. Saving an on-disk model ------------------------------------------------------------------------


def test_save_above_threshold_writes_relative_locations_and_same_values(tmp_path):
    model = mixed_weights_model()
    on_disk = load_model(saved_external(model, tmp_path / "src"), weights_on_disk=True)
    before = on_disk.SerializeToString()

    out = tmp_path / "out" / "saved.onnx"
    written = save_model(on_disk, out, external_threshold_bytes=0)

    assert written == [out, out.with_name("saved.onnx.data")]
    assert on_disk.SerializeToString() == before, "the caller's model must not change"
    raw = out.read_bytes()
    assert str(tmp_path).encode() not in raw, "an absolute path leaked into the written model"
    entries = external_entries(out)
    assert set(entries) == set(WEIGHT_NAMES)
    for name, entry in entries.items():
        assert entry["location"] == "saved.onnx.data", name
        assert not os.path.isabs(entry["location"]) and ".." not in entry["location"]
    # The data were copied: the source files are not needed any more.
    shutil.rmtree(tmp_path / "src")
    reloaded = onnx.load(str(out))
    for name, want in original_values(model).items():
        assert_same_values(numpy_helper.to_array(next(t for t in reloaded.graph.initializer if t.name == name)), want)
    onnx.checker.check_model(str(out))


def test_save_under_threshold_writes_one_file_with_same_values(tmp_path):
    model = mixed_weights_model()
    on_disk = load_model(saved_external(model, tmp_path / "src"), weights_on_disk=True)
    before = on_disk.SerializeToString()

    out = tmp_path / "out" / "inline.onnx"
    written = save_model(on_disk, out, external_threshold_bytes=1 << 30)

    assert written == [out]
    assert not out.with_name("inline.onnx.data").exists()
    assert on_disk.SerializeToString() == before, "the caller's model must not change"
    shutil.rmtree(tmp_path / "src")
    stored = onnx.load(str(out), load_external_data=False)
    assert not any(uses_external_data(t) or t.external_data for t in stored.graph.initializer)
    for name, want in original_values(model).items():
        assert_same_values(numpy_helper.to_array(next(t for t in stored.graph.initializer if t.name == name)), want)
    # Written inline, the model is byte for byte the one that was never external.
    assert out.read_bytes() == model.SerializeToString()


def test_saving_the_same_on_disk_model_twice_gives_identical_bytes(tmp_path):
    model = mixed_weights_model()
    on_disk = load_model(saved_external(model, tmp_path / "src"), weights_on_disk=True)
    for folder in ("a", "b"):
        save_model(on_disk, tmp_path / folder / "m.onnx", external_threshold_bytes=0)
        save_model(on_disk, tmp_path / folder / "inline.onnx", external_threshold_bytes=1 << 30)
    # Same as the same model saved from memory.
    save_model(model, tmp_path / "memory" / "m.onnx", external_threshold_bytes=0)
    for name in ("m.onnx", "m.onnx.data", "inline.onnx"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    for name in ("m.onnx", "m.onnx.data"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "memory" / name).read_bytes(), name


def test_data_file_tensors_start_on_4096_byte_boundaries(tmp_path):
    model = mixed_weights_model()
    on_disk = load_model(saved_external(model, tmp_path / "src"), weights_on_disk=True)
    out = tmp_path / "out" / "m.onnx"
    save_model(on_disk, out, external_threshold_bytes=0)

    entries = external_entries(out)
    offsets = sorted(int(entry.get("offset", "0")) for entry in entries.values())
    assert offsets == [0, 4096, 8192]
    assert all(offset % EXTERNAL_ALIGNMENT_BYTES == 0 for offset in offsets)
    sizes = {name: int(entry["length"]) for name, entry in entries.items()}
    assert sizes == {"w32": 4096, "w16": 2048, "w8": 1024}
    assert out.with_name("m.onnx.data").stat().st_size == 8192 + 1024


# Regression (fixed): save_model unlinks the target .onnx and .onnx.data before copying the on-disk
# weights, so saving an on-disk model onto the files its weights live in
# (then open(data_path, 'wb') at :199 and copy_span from the new
# empty file) raises OSError and leaves the user's model destroyed
def test_saving_an_on_disk_model_over_its_own_files_keeps_it_intact(tmp_path):
    model = mixed_weights_model()
    path = saved_external(model, tmp_path)
    on_disk = load_model(path, weights_on_disk=True)
    with contextlib.suppress(OSError, ValueError, UserError):  # refusing is fine; destroying the source is not
        save_model(on_disk, path, external_threshold_bytes=0)
    assert path.is_file(), "the model file was deleted"
    reloaded = load_model(path)
    for name, want in original_values(model).items():
        assert_same_values(numpy_helper.to_array(next(t for t in reloaded.graph.initializer if t.name == name)), want)


def test_save_without_copy_file_range_writes_the_same_bytes(tmp_path, monkeypatch):
    on_disk = load_model(saved_external(mixed_weights_model(), tmp_path / "src"), weights_on_disk=True)
    save_model(on_disk, tmp_path / "kernel" / "m.onnx", external_threshold_bytes=0)

    def unsupported(*args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    monkeypatch.setattr(weights_on_disk, "_COPY_CHUNK_BYTES", 1000)  # several chunks per tensor
    save_model(on_disk, tmp_path / "python" / "m.onnx", external_threshold_bytes=0)
    for name in ("m.onnx", "m.onnx.data"):
        assert (tmp_path / "kernel" / name).read_bytes() == (tmp_path / "python" / name).read_bytes(), name


def test_copy_span_appends_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(weights_on_disk, "_COPY_CHUNK_BYTES", 7)
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * 4)
    with open(tmp_path / "target.bin", "wb") as target:
        target.write(b"head")
        copy_span(source, 100, 50, target)
        assert target.tell() == 54
        target.write(b"tail")
    assert (tmp_path / "target.bin").read_bytes() == b"head" + source.read_bytes()[100:150] + b"tail"


def test_data_file_truncated_after_loading_fails_the_save(tmp_path):
    on_disk = load_model(saved_external(mixed_weights_model(), tmp_path / "src"), weights_on_disk=True)
    data = tmp_path / "src" / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:6000])  # w16 (4096-6144) is cut
    with pytest.raises(OSError, match="m.onnx.data ended before byte"):
        save_model(on_disk, tmp_path / "out" / "m.onnx", external_threshold_bytes=0)


# 4. Shape inference -------------------------------------------------------------------------------


def test_infer_shapes_on_disk_equals_in_memory(tmp_path):
    path = saved_external(BUILTIN_MODELS["transformer"](), tmp_path)
    on_disk = load_model(path, weights_on_disk=True)
    in_memory = load_model(path)
    assert sum(is_on_disk(t) for t in on_disk.graph.initializer) > 10
    assert not any(uses_external_data(t) for t in in_memory.graph.initializer)

    assert value_info.infer_shapes(on_disk) is on_disk  # in place
    value_info.infer_shapes(in_memory)

    assert len(on_disk.graph.value_info) > 100
    assert [v.SerializeToString() for v in on_disk.graph.value_info] == [
        v.SerializeToString() for v in in_memory.graph.value_info]
    assert [v.SerializeToString() for v in on_disk.graph.output] == [
        v.SerializeToString() for v in in_memory.graph.output]
    assert sum(is_on_disk(t) for t in on_disk.graph.initializer) > 10, "inference must not load weights"
    # The weightless copy used for reading shapes agrees too.
    assert value_info.inferred_copy(on_disk).graph.value_info == value_info.inferred_copy(in_memory).graph.value_info


def reshape_by_shape_tensor_model() -> onnx.ModelProto:
    """r = Reshape(x, shape); y = r + float(Shape(r)): shape inference and folding need `shape`'s values."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="/Reshape"),
        helper.make_node("Shape", ["r"], ["s"], name="/Shape"),
        helper.make_node("Cast", ["s"], ["sf"], name="/Cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["r", "sf"], ["y"], name="/Add"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 16])], [graphs.float_input("y", [4, 8])],
                             [numpy_helper.from_array(np.array([4, 8], np.int64), "shape")])


def saved_all_external(model: onnx.ModelProto, path: Path) -> Path:
    """What onnx's own external-data save writes with size_threshold=0: every tensor, int64 included."""
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=0)
    return path


# Regression (fixed): load_model(weights_on_disk=True) also leaves
# int64 shape tensors of a user model on disk, and value_info.weightless_copy
# keeps non-weights as they are, i.e. pointing at an absolute
# location ONNX shape inference cannot read: the Reshape's output gets no shape on disk and [4, 8]
# when loaded
def test_infer_shapes_reads_an_on_disk_shape_tensor(tmp_path):
    path = saved_all_external(reshape_by_shape_tensor_model(), tmp_path / "m.onnx")
    on_disk, in_memory = load_model(path, weights_on_disk=True), load_model(path)
    value_info.infer_shapes(on_disk)
    value_info.infer_shapes(in_memory)
    assert "r" in {v.name for v in in_memory.graph.value_info}
    assert [v.SerializeToString() for v in on_disk.graph.value_info] == [
        v.SerializeToString() for v in in_memory.graph.value_info]


# Regression (fixed): same cause as test_infer_shapes_reads_an_on_disk_shape_tensor, seen by the user:
# sanitize folds Shape(Reshape(x, shape)) for the inline model but not when `shape` is in the model's
# external data
def test_sanitize_of_a_model_with_external_int64_tensors_equals_inline(tmp_path):
    save_model(reshape_by_shape_tensor_model(), tmp_path / "inline.onnx")
    saved_all_external(reshape_by_shape_tensor_model(), tmp_path / "external.onnx")
    inline_report = sanitize_model(tmp_path / "inline.onnx", tmp_path / "from_inline.onnx")
    external_report = sanitize_model(tmp_path / "external.onnx", tmp_path / "from_external.onnx")
    assert [n.op_type for n in onnx.load(str(tmp_path / "from_inline.onnx")).graph.node] == ["Reshape", "Add"]
    assert [n.op_type for n in onnx.load(str(tmp_path / "from_external.onnx")).graph.node] == ["Reshape", "Add"]
    assert external_report["nodes_folded"] == inline_report["nodes_folded"] == 2


# 5. ONNX Runtime on an on-disk model -------------------------------------------------------------


def test_ort_session_on_disk_gives_the_same_outputs(tmp_path):
    path = saved_external(mixed_weights_model(), tmp_path)
    on_disk = load_model(path, weights_on_disk=True)
    before = on_disk.SerializeToString()
    feeds = {"x": graphs.random_input((32, 32))}

    got = OrtSession(on_disk).run(feeds)
    want = OrtSession(load_model(path)).run(feeds)

    assert list(got) == ["y"]
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(want["y"], graphs.run(mixed_weights_model(), feeds)[0])
    assert on_disk.SerializeToString() == before, "the session must not change the caller's model"


def test_ort_session_on_disk_transformer(tmp_path):
    path = saved_external(BUILTIN_MODELS["transformer"](), tmp_path)
    rng = np.random.default_rng(3)
    feeds = {"input_ids": rng.integers(0, 256, (1, 16)).astype(np.int64),
             "attention_mask": np.concatenate([np.ones((1, 12)), np.zeros((1, 4))], axis=1).astype(np.int64)}
    got = OrtSession(load_model(path, weights_on_disk=True)).run(feeds)
    want = OrtSession(load_model(path)).run(feeds)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_ort_session_with_weights_from_two_folders(tmp_path):
    first, second = mixed_weights_model(seed=1), mixed_weights_model(seed=2)
    model = load_model(saved_external(first, tmp_path / "one"), weights_on_disk=True)
    donor = load_model(saved_external(second, tmp_path / "two"), weights_on_disk=True)
    w16 = next(t for t in model.graph.initializer if t.name == "w16")
    w16.CopyFrom(next(t for t in donor.graph.initializer if t.name == "w16"))
    folders = {on_disk_span(t)[0].parent for t in model.graph.initializer if is_on_disk(t)}
    assert folders == {(tmp_path / "one").resolve(), (tmp_path / "two").resolve()}
    before = model.SerializeToString()

    # What it should compute: `first` with the second model's w16.
    expected_model = mixed_weights_model(seed=1)
    expected_w16 = next(t for t in expected_model.graph.initializer if t.name == "w16")
    expected_w16.CopyFrom(next(t for t in second.graph.initializer if t.name == "w16"))
    feeds = {"x": graphs.random_input((32, 32))}

    got = OrtSession(model).run(feeds)

    np.testing.assert_array_equal(got["y"], OrtSession(expected_model).run(feeds)["y"])
    assert not np.array_equal(got["y"], OrtSession(first).run(feeds)["y"])
    assert model.SerializeToString() == before, "the session must not load the caller's weights"


# 6. What constant folding reads --------------------------------------------------------------------


def folding_model() -> onnx.ModelProto:
    """Transpose(wt) and Add(transposed, w_add) are constant; MatMul(x, ...) and MatMul(., w_live) are not."""
    wt = numpy_helper.from_array(RNG.standard_normal((16, 32)).astype(np.float32), "wt")
    w_add = numpy_helper.from_array(RNG.standard_normal((32, 16)).astype(np.float32), "w_add")
    w_live = numpy_helper.from_array(RNG.standard_normal((16, 16)).astype(np.float32), "w_live")
    nodes = [
        helper.make_node("Transpose", ["wt"], ["transposed"], name="/Transpose", perm=[1, 0]),
        helper.make_node("Add", ["transposed", "w_add"], ["folded"], name="/ConstAdd"),
        helper.make_node("MatMul", ["x", "folded"], ["h"], name="/MatMul"),
        helper.make_node("MatMul", ["h", "w_live"], ["y"], name="/MatMul_1"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 32])], [graphs.float_input("y", [2, 16])],
                             [wt, w_add, w_live])


def test_folding_loads_only_the_weights_constant_nodes_read(tmp_path):
    model = folding_model()
    on_disk = load_model(saved_external(model, tmp_path), weights_on_disk=True)
    assert all(is_on_disk(t) for t in on_disk.graph.initializer)

    assert _load_what_folding_reads(on_disk) == 2

    by_name = {tensor.name: tensor for tensor in on_disk.graph.initializer}
    for name in ("wt", "w_add"):
        assert not is_on_disk(by_name[name]) and not by_name[name].external_data
        assert by_name[name].HasField("raw_data")
    assert is_on_disk(by_name["w_live"]) and not by_name["w_live"].HasField("raw_data")
    for name, want in original_values(model).items():
        assert_same_values(tensor_array(by_name[name]), want)
    assert _load_what_folding_reads(on_disk) == 0, "a second pass finds nothing left to load"


def test_folding_loads_nothing_when_no_node_is_constant(tmp_path):
    model = mixed_weights_model()
    model.graph.node[1].input[0] = "x"  # Cast(x): nothing but Cast(w8) stays constant
    on_disk = load_model(saved_external(model, tmp_path), weights_on_disk=True)
    assert _load_what_folding_reads(on_disk) == 1
    on_disk_names = {t.name for t in on_disk.graph.initializer if is_on_disk(t)}
    assert on_disk_names == {"w32", "w16"}


def shape_derived_gather_model() -> onnx.ModelProto:
    """BERT's position embeddings: Gather(pos, Range(0, Shape(x)[1])); x has a static shape."""
    pos = numpy_helper.from_array(np.arange(16 * 64, dtype=np.float32).reshape(16, 64) / 7, "pos")
    nodes = [
        helper.make_node("Shape", ["x"], ["length_1d"], name="/Shape", start=1, end=2),
        helper.make_node("Squeeze", ["length_1d"], ["length"], name="/Squeeze"),
        helper.make_node("Range", ["zero", "length", "one"], ["ids"], name="/Range"),
        helper.make_node("Gather", ["pos", "ids"], ["pe"], name="/Gather"),
        helper.make_node("Add", ["x", "pe"], ["y"], name="/Add"),
    ]
    scalars = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one")]
    return graphs.make_model(nodes, [graphs.float_input("x", [1, 8, 64])], [graphs.float_input("y", [1, 8, 64])],
                             [pos, *scalars])


# Regression (fixed): _load_what_folding_reads treats only
# initializers and outputs of all-constant nodes as constant, but Polygraphy folds with
# fold_shapes=True: Shape(x) of a static x becomes a constant, so Gather(pos, Range(Shape(x))) is
# folded reading `pos`, which is still on disk; ONNX Runtime refuses its absolute location and the
# fold silently fails (error_ok=True), so a model with external data is sanitized differently from the
# same model inline
def test_sanitize_folds_a_shape_derived_gather_of_an_on_disk_weight(tmp_path):
    model = shape_derived_gather_model()
    save_model(model, tmp_path / "inline.onnx")
    save_model(model, tmp_path / "external.onnx", external_threshold_bytes=0)
    inline_report = sanitize_model(tmp_path / "inline.onnx", tmp_path / "from_inline.onnx")
    external_report = sanitize_model(tmp_path / "external.onnx", tmp_path / "from_external.onnx")
    assert [n.op_type for n in onnx.load(str(tmp_path / "from_inline.onnx")).graph.node] == ["Add"]
    assert [n.op_type for n in onnx.load(str(tmp_path / "from_external.onnx")).graph.node] == ["Add"]
    assert external_report["nodes_folded"] == inline_report["nodes_folded"]


def constant_node_weights_model() -> onnx.ModelProto:
    """y = (x @ Transpose(Constant wt)) @ Constant w_live: weights held by Constant nodes, not initializers."""
    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("Constant", [], ["wt"], name="/Constant",
                         value=numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "wt")),
        helper.make_node("Transpose", ["wt"], ["transposed"], name="/Transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "transposed"], ["h"], name="/MatMul"),
        helper.make_node("Constant", [], ["w_live"], name="/Constant_1",
                         value=numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w_live")),
        helper.make_node("MatMul", ["h", "w_live"], ["y"], name="/MatMul_1"),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 32])], [graphs.float_input("y", [2, 32])])


def test_constant_node_weights_stay_on_disk_and_run(tmp_path):
    model = constant_node_weights_model()
    path = saved_external(model, tmp_path)
    on_disk = load_model(path, weights_on_disk=True)
    values = [node.attribute[0].t for node in on_disk.graph.node if node.op_type == "Constant"]
    assert all(is_on_disk(tensor) for tensor in values)
    feeds = {"x": graphs.random_input((2, 32))}
    np.testing.assert_array_equal(OrtSession(on_disk).run(feeds)["y"], OrtSession(model).run(feeds)["y"])


# Regression (fixed): _load_what_folding_reads collects on-disk
# tensors from graph.initializer only, but load_model anchors Constant-node values too (all_tensors):
# Transpose(Constant) is then folded reading an on-disk value, ONNX Runtime refuses its absolute
# location, the whole first folding pass fails, and the Transpose stays
def test_sanitize_folds_a_transpose_of_an_on_disk_constant_node(tmp_path):
    model = constant_node_weights_model()
    save_model(model, tmp_path / "inline.onnx")
    save_model(model, tmp_path / "external.onnx", external_threshold_bytes=0)
    sanitize_model(tmp_path / "inline.onnx", tmp_path / "from_inline.onnx")
    sanitize_model(tmp_path / "external.onnx", tmp_path / "from_external.onnx")
    inline = onnx.load(str(tmp_path / "from_inline.onnx"))
    external = onnx.load(str(tmp_path / "from_external.onnx"))
    assert "Transpose" not in [n.op_type for n in inline.graph.node]
    assert [n.op_type for n in external.graph.node] == [n.op_type for n in inline.graph.node]
