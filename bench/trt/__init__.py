"""TensorRT facts read from real wheels and sources: the parser's operator lists, the
bindings' API surface and classes, trtexec's flags.
"""
