"""`ReferenceRunner`: the FP32 model in ONNX Runtime, the yardstick every candidate is measured by.

Same interface as `EmulatedRunner`: `run(feeds)` returns the graph outputs by
name and, with `expose_intermediates=True`, every float node output of the
main graph (for localisation). Exposing works on a copy of the model with the
value_info entries of the newly exposed tensors stripped (a graph output
carries its own type; a stale duplicate would contradict it); the caller's
model is never changed. The session computes op by op, like the emulation
(see `ort_session.py`), so differences between the two are differences of
precision, not of ONNX Runtime's fusions. A model ONNX Runtime cannot load
or run is a `UserError` (`ort_session.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from trtpipe.onnxmodel.value_info import strip_value_info
from trtpipe.numerics.ort_session import OrtSession, with_extra_outputs
from trtpipe.numerics.tensor_types import infer_tensor_types, is_float_tensor


class ReferenceRunner:
    """Runs `model` as it is (normally the FP32 model) on the CPU."""

    def __init__(self, model: onnx.ModelProto, *, expose_intermediates: bool = False,
                 extra_outputs: Sequence[str] = (), inferred: onnx.ModelProto | None = None) -> None:
        """`extra_outputs`: tensors to return besides the graph outputs (promoted ones);
        `expose_intermediates`: every float node output; `inferred`: `inferred_copy(model)` when
        the caller already made it (one shape inference less)."""
        graph = model.graph
        self.graph_outputs = [value.name for value in graph.output]
        exposed = list(extra_outputs)
        if expose_intermediates:
            types = infer_tensor_types(model, inferred)
            exposed += [out for node in graph.node for out in node.output if out and is_float_tensor(types, out)]
        runnable = model
        if exposed:
            runnable = with_extra_outputs(model, exposed)
            strip_value_info(runnable)
        self._session = OrtSession(runnable, user_model=True)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._session.run(feeds)
