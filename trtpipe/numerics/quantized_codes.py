"""Which FP8/FP4 tensors of a model are quantized codes: a QuantizeLinear's output, a
DequantizeLinear's input, or the zero point of either.

Why: ONNX Runtime runs QuantizeLinear/DequantizeLinear with float8 codes on the CPU
(`float8e4m3fn` and the other FP8 types from opset 19, checked with onnxruntime 1.32), as
it runs INT8 ones. A code is not a value the emulator rounds: Q computes it from FP32
(its input, FP16-rounded when the plan stores that FP16), DQ turns it back into a float
that the emulator rounds like any other FP16 tensor. So a Q/DQ model runs in the
emulation as it is, and both the reference and the candidate include the fake
quantization.

Decisions:
- A code is left exactly as authored, in its own type: an FP8 tensor qualifies when it is
  produced only by a default-domain QuantizeLinear (output 0) or is a constant
  (initializer, `Constant`), and every reader uses it as DequantizeLinear's input 0 or 2, or
  QuantizeLinear's input 2 (the zero point, which sets the output type). It must not be a
  graph output: its values are codes, not what the model computes.
- Any other FP8/FP4 tensor (an FP8 Cast, an FP8 graph input or output, an FP8 tensor fed to
  Conv) has no faithful emulation and stays refused (`refusals.py`).
- Codes are never exposed for localisation: a code differs by one step where the float it
  encodes differs by a rounding, so the DQ's output is what is compared.
"""

from __future__ import annotations

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.onnxmodel.subgraphs import all_graphs

QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
# (op type, input slot) pairs that read a code.
CODE_READERS = frozenset({(DEQUANTIZE, 0), (DEQUANTIZE, 2), (QUANTIZE, 2)})


def quantized_codes(model: onnx.ModelProto) -> set[str]:
    """Names of the tensors that can only be Q/DQ codes (their type is the caller's to check)."""
    produced_by_q: set[str] = set()
    constants: set[str] = set()
    other_producers: set[str] = set()
    read_as_code: set[str] = set()
    read_otherwise: set[str] = set()
    outputs: set[str] = set()
    for graph in all_graphs(model.graph):
        constants.update(t.name for t in graph.initializer)
        outputs.update(v.name for v in graph.output)
        for node in graph.node:
            default = node.domain in DEFAULT_DOMAINS
            for index, name in enumerate(node.output):
                if default and node.op_type == QUANTIZE and index == 0:
                    produced_by_q.add(name)
                elif default and node.op_type == "Constant":
                    constants.add(name)
                else:
                    other_producers.add(name)
            for index, name in enumerate(node.input):
                if default and (node.op_type, index) in CODE_READERS:
                    read_as_code.add(name)
                else:
                    read_otherwise.add(name)
    return ((produced_by_q | constants) - other_producers - read_otherwise - outputs) & read_as_code
