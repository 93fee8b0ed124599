"""The TensorRT seam: the only package in trtpipe that imports `tensorrt`, and only lazily.

Importing this package (or any module in it) never imports `tensorrt`; a test walks
every trtpipe module in a fresh interpreter to keep it that way. The build stage and
the engine candidate of `validate` get their TensorRT through `backend()`; tests pass
a test double with the same interface (`TensorRTBackend`) instead.
"""

from __future__ import annotations

from trtpipe.trt.seam import (
    PRECISION_MODES,
    Availability,
    BuildOptions,
    BuildResult,
    Environment,
    TensorRTBackend,
)

__all__ = [
    "PRECISION_MODES",
    "Availability",
    "BuildOptions",
    "BuildResult",
    "Environment",
    "TensorRTBackend",
    "backend",
]


def backend() -> TensorRTBackend:
    """The real backend (TensorRT through Polygraphy). Selecting it imports nothing heavy."""
    from trtpipe.trt.polygraphy_backend import PolygraphyBackend

    return PolygraphyBackend()
