"""Names: node names as TensorRT's parser sees them, unique node names, promoted and
absorbed names, bounded regexes, scopes and parser support.

May import `trtpipe.onnxmodel` only (and the TensorRT seam's data for parser support).
"""
