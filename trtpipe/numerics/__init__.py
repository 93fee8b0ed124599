"""Numerics shared by the stages that run the model (`precision`, `validate`, sample data).

Decision: these were `trtpipe.validate`'s internals, but `precision` (range rule,
search) and `data.py` need them as much as `validate` does; a neutral package keeps
the stages from reaching into each other.

Runners (same `run(feeds) -> {name: array}` interface):
- `reference.ReferenceRunner`: the FP32 model in ONNX Runtime.
- `emulator.EmulatedRunner`: a mixed-precision candidate with every FP16/BF16
  tensor rounded as low-precision storage would round it
  (`emulated_graph.py` builds the graph, `rounding.py` defines the rounding,
  `tensor_types.py` finds which tensors to round, `quantized_codes.py` which FP8
  tensors are Q/DQ codes ONNX Runtime runs as they are, `refusals.py` says what cannot
  be emulated, `ort_session.py` runs it).

Measures: `metrics.py`, per-output numbers.
Inputs: `inputs.py` generates seeded sample inputs or loads `.npz` / Polygraphy JSON
(`input_types.py`: the element types a graph input is fed with).
"""
