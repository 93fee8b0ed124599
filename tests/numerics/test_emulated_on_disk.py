"""The emulation of a model whose FP16 weights stay on disk (a large model) gives the same numbers.

On-disk weights are widened by a `Cast` in the emulated graph instead of an FP32 copy
in memory (`emulated_graph._convert_initializers`); in-memory ones are converted.
"""

import numpy as np

from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.models import BUILTIN_INPUT_SPECS, BUILTIN_MODELS
from trtpipe.numerics.emulated_graph import STORED_SUFFIX, emulation_from_model
from trtpipe.numerics.emulator import EmulatedRunner
from tests.validate.naive_fp16 import naive_fp16


def feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(spec["low"], spec["high"], size=(1, 16)).astype(spec["dtype"])
            for name, spec in BUILTIN_INPUT_SPECS["transformer"].items()}


def test_on_disk_fp16_weights_are_widened_by_casts_with_identical_results(tmp_path):
    model = naive_fp16(BUILTIN_MODELS["transformer"]())
    path = tmp_path / "fp16.onnx"
    save_model(model, path, external_threshold_bytes=0)
    on_disk, in_memory = load_model(path, weights_on_disk=True), load_model(path)

    widened = [node for node in emulation_from_model(on_disk).model.graph.node
               if node.op_type == "Cast" and node.input[0].endswith(STORED_SUFFIX)]
    assert widened, "on-disk FP16 weights get a widening Cast"
    assert not any(name.endswith(STORED_SUFFIX) for node in emulation_from_model(in_memory).model.graph.node
                   for name in node.input)

    inputs = feeds()
    expected = EmulatedRunner(in_memory).run(inputs)
    actual = EmulatedRunner(on_disk).run(inputs)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
