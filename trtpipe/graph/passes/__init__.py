"""Small undoable graph passes and checks: opset conversion, Reshape allowzero,
input dims, shape ranges, model validity.

May import `trtpipe.onnxmodel` and `trtpipe.numerics`.
"""
