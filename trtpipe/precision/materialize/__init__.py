"""Makes a decided precision plan true in the ONNX graph: node types and type rules,
weights (converted once, copied where shared), Casts at the boundaries, redundant Casts
removed, control-flow bodies and If outputs.

May import `trtpipe.precision.network` and lower packages; never `auto` or `plan`.
"""
