"""ONNX graph passes: sanitize, upgrade (opset and LayerNorm fusion) and promote outputs
live here at the top; the rooms below hold what they are built from.

Layered top to bottom (a room imports only the rooms below it):
`layernorm/` > `fold/`, `passes/` > `onnx_gs/`, `names/`; models are read and written
through `trtpipe.onnxmodel`, below this package.
"""
