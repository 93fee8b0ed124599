"""TensorRT's ONNX parser, known without TensorRT: the parser's operator lists per
release (`onnx_parser_ops/`), the plan check against them, parsed types, and parsing
through the seam.

Imports nothing from `tensorrt` at module import time.
"""
