"""float32 -> float16 for large weights, through ONNX Runtime's Cast kernel.

Decision: NumPy converts float32 to float16 one element at a time (~1 GB/s
here, 4 s for the 2.7 GB encoder of bench/scale/scale.py); ONNX Runtime's Cast uses
the CPU's F16C instructions and is 5x faster. Both round to nearest, ties to
even, keep infinities and subnormals, and give bit-identical results
(tests/precision/test_fp16_cast.py); a NaN stays a NaN (its payload bits may
differ, which no consumer reads). Small arrays use NumPy: a session run costs
more than their conversion. The session is built once per process.
"""

from __future__ import annotations

import functools

import numpy as np

# Below this many elements NumPy is faster than a session run.
MIN_ELEMENTS_FOR_ORT = 1 << 16


def to_float16(values: np.ndarray) -> np.ndarray:
    """float32 `values` as float16, same shape."""
    values = np.asarray(values, dtype=np.float32)
    if values.size < MIN_ELEMENTS_FOR_ORT:
        with np.errstate(over="ignore"):  # beyond 65504 -> inf is the defined result (callers clip first)
            return values.astype(np.float16)
    flat = np.ascontiguousarray(values).reshape(-1)
    return _cast_session().run(None, {"x": flat})[0].reshape(values.shape)


@functools.cache
def _cast_session():
    from onnx import TensorProto, helper

    from trtpipe.numerics.ort_logging import cpu_session, session_options

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "trtpipe_fp16_cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what every supported onnxruntime reads
    options = session_options()
    options.intra_op_num_threads = 1  # callers convert on their own threads (weight_copies.py)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return cpu_session(model.SerializeToString(), options)
