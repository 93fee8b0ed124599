"""Precision control by rewriting the ONNX graph (TensorRT 11 networks are strongly typed).

Four rooms, layered top to bottom (a room imports only the rooms below it):
- `plan/`: the planner (user rules, then automatic rules, then the fewest-Cast
  boundaries), the plan document and every node's reason.
- `auto/`: the automatic rules measured on the reference run (range at both ends of
  FP16, boundaries, constants, flush effect, normalization groups and their inputs).
- `cut/` (beside `auto/`): smoothing and the fewest-Cast minimum cut.
- `materialize/`: makes a decided plan true in the graph (node types, weights and their
  copies, Casts, redundant Casts, control-flow bodies).
- `network/`: the parsed network as TensorRT's parser sees it, its indexes, names, the
  user's rules resolved against it, element types and FLOPs.
"""
