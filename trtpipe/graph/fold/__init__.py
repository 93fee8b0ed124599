"""Constant folding: the fast fold path, the check that a fold is safe, and shape folding.

May import `trtpipe.onnxmodel`, `trtpipe.graph.onnx_gs` and `trtpipe.numerics`.
"""
