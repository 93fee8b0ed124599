"""The bridge to onnx-graphsurgeon: model <-> graph, its export, node ordering and a
read-only view of a ModelProto.

May import `trtpipe.onnxmodel` only.
"""
