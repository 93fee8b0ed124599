"""The `validate` stage's own parts: a comparator judges what the runners produced.

- `compare.py`: tolerances, `judge`, and the aggregation of iterations into one
  verdict per candidate;
- `localize.py`: the first node whose output goes wrong, by tensor name;
- `report_table.py`: the console table; `plot.py`: `accuracy.png`.

The runners and metrics themselves live in `trtpipe.numerics` (shared with `precision`).
"""
