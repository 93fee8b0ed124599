"""trtpipe: a declarative, cached build pipeline from ONNX to an accurate TensorRT engine.

Importing this package has no side effects: no Hydra initialisation, no TensorRT,
no file system access.
"""

__version__ = "0.1.0"
