"""The library behind the `validate` stage: runners produce results, a comparator judges them.

Runners (same `run(feeds) -> {name: array}` interface):
- `reference.ReferenceRunner`: the FP32 model in ONNX Runtime.
- `emulator.EmulatedRunner`: a mixed-precision candidate with every FP16/BF16
  tensor rounded as low-precision storage would round it
  (`emulated_graph.py` builds the graph, `rounding.py` defines the rounding,
  `tensor_types.py` finds which tensors to round, `ort_session.py` runs it).

Judging:
- `metrics.py`: per-output numbers; `compare.py`: tolerances, `judge`, and the
  aggregation of iterations into one verdict per candidate;
- `localize.py`: the first node whose output goes wrong, by tensor name.

Inputs: `inputs.py` generates seeded sample inputs or loads `.npz` / Polygraphy JSON.
"""
