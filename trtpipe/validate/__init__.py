"""The `validate` stage's own parts: a comparator judges what the runners produced.

- `compare.py`: tolerances, `judge`, and the aggregation of iterations into one
  verdict per candidate;
- `localize.py`: the first node whose output goes wrong, by tensor name;
  `upstream_origins.py`: when that node is FP32, the upstream low-precision nodes whose
  rounding it amplifies, ranked by measured contribution;
- `degenerate_data.py`: whether the sample data exercised anything (flagged in the verdict);
- `report_table.py`: the console table; `plot.py`: `accuracy.png`;
- quantized models: `code_agreement.py` (the share of Q codes the candidate computes differently),
  `float_model.py` (`validate.float_model`: the reference and candidates against the unquantized model),
  `anchored.py` (the criterion: a verdict anchored on a float model, shared with the precision search) and
  `anchor_model.py` (the anchor: the float model, or the QDQ model without its activations' rounding).

The runners and metrics themselves live in `trtpipe.numerics` (shared with `precision`).
"""
