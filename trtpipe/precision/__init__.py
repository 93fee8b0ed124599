"""Precision control by rewriting the ONNX graph (TensorRT 11 networks are strongly typed).

A precision plan (every node's precision: fp32, fp16, bf16 or keep) becomes
tensor types in the graph: `materialize` converts weights, retypes nodes and
inserts the fewest Casts at the boundaries. Deciding the plan is the planner's
job; this package only makes a decided plan true in the graph, and reports
every decision it took on the way.
"""
