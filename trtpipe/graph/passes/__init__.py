"""Small undoable graph passes and checks: opset conversion, Reshape allowzero, no-op Casts,
INT32 bias DequantizeLinear folding, input dims, shape ranges, model validity.

May import `trtpipe.onnxmodel` and `trtpipe.numerics`.
"""
