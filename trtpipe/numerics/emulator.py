"""`EmulatedRunner`: run a mixed-precision candidate on the CPU with faithful FP16/BF16 rounding.

The runner only produces results (the comparator judges them). It builds the
emulated FP32 compute graph once (`emulated_graph.py` explains the rounding)
and runs it with ONNX Runtime, op by op (`ort_session.py` explains why no
optimisation is allowed).

Output contract of `run`:
- every graph output of the candidate, under its own name; an FP16 output
  comes back as FP32 holding the FP16-rounded values (`.astype(np.float16)`
  is exact);
- with `expose_intermediates=True`, also every float node output of the main
  graph, under the candidate's tensor name, as the *rounded* value the next
  op reads. Exposing works on a copy: the product model is never changed.
"""

from __future__ import annotations

import numpy as np
import onnx

from trtpipe.numerics.emulated_graph import Emulation, emulation_from_model
from trtpipe.numerics.ort_session import OrtSession, with_extra_outputs


class EmulatedRunner:
    """Runs `model` with every FP16/BF16 tensor rounded as low-precision storage would round it."""

    def __init__(self, model: onnx.ModelProto, *, expose_intermediates: bool = False,
                 extra_outputs: list[str] | tuple = ()) -> None:
        """`extra_outputs`: tensors of the candidate to return besides (validate's quantized codes)."""
        self.emulation: Emulation = emulation_from_model(model)
        self.graph_outputs = [value.name for value in model.graph.output]
        runnable = self.emulation.model
        exposed = (list(self.emulation.float_tensors) if expose_intermediates else []) + list(extra_outputs)
        if exposed:
            runnable = with_extra_outputs(runnable, exposed)
        self._session = OrtSession(runnable, graph="the FP16/BF16 emulation graph of the candidate model")

    @property
    def producers(self) -> dict[str, tuple[str, str]]:
        """Tensor name -> (producing node name, op type) in the candidate model."""
        return self.emulation.producers

    @property
    def precisions(self) -> dict[str, str]:
        """Tensor name -> its precision in the candidate (`fp16`, `bf16`, `fp32`, ...)."""
        return self.emulation.precisions

    @property
    def notes(self) -> list[str]:
        """Decisions the emulation took on the model's behalf (e.g. types assumed FP32)."""
        return self.emulation.notes

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._session.run(feeds)
