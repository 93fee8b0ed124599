"""Reading a built engine back: the engine inspector's JSON, layer names mapped to ONNX
nodes, and the precision audit.

Imports nothing from `tensorrt` at module import time.
"""
