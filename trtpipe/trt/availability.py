"""Can an engine be built here? `tensorrt` importable, and a CUDA device visible.

Decision (after Polygraphy's lazy importer): a missing TensorRT is reported with the
module name, the original error and what to install, never as a bare ImportError.
The check imports `tensorrt` only when called, never at import time. When neither
libcudart nor nvidia-smi can count the devices, the build is attempted (and fails
with TensorRT's own message) rather than deferred on a guess.
"""

from __future__ import annotations

from trtpipe.trt.environment import cuda_device_count
from trtpipe.trt.seam import Availability

INSTALL_HINT = (
    "install TensorRT on a machine with an NVIDIA GPU: pip install tensorrt-cu13 (CUDA 13) "
    "or pip install tensorrt-cu12 (CUDA 12); on Jetson use the TensorRT of JetPack"
)


class TensorRTUnavailable(RuntimeError):
    """Raised by the real backend when asked to build or run without TensorRT or a GPU."""

    def __init__(self, availability: Availability) -> None:
        self.availability = availability
        super().__init__(availability.message())


def import_tensorrt():
    """`import tensorrt`, or TensorRTUnavailable naming the module, the error and the fix."""
    try:
        import tensorrt
    except Exception as error:  # ImportError, or OSError from a missing libnvinfer
        raise TensorRTUnavailable(_not_importable(error)) from error
    return tensorrt


def check_availability() -> Availability:
    try:
        trt = import_tensorrt()
    except TensorRTUnavailable as missing:
        return missing.availability
    devices = cuda_device_count()
    if devices == 0:
        version = getattr(trt, "__version__", "?")
        return Availability(
            False,
            f"TensorRT {version} is importable but no CUDA device is visible "
            "(the CUDA runtime reports 0 devices, or CUDA_VISIBLE_DEVICES hides them)",
            "run on a machine with an NVIDIA GPU and driver (check `nvidia-smi` and CUDA_VISIBLE_DEVICES)",
        )
    return Availability(True)


def _not_importable(error: BaseException) -> Availability:
    return Availability(
        False,
        f"TensorRT is not available: the Python module 'tensorrt' cannot be imported "
        f"({type(error).__name__}: {error})",
        INSTALL_HINT,
    )
