"""Load the TensorRT-RTX EP into ONNX Runtime and list the devices it offers itself for.

Used by the child process (trtpipe.trt.rtx.child) and by validate's candidate runner
(trtpipe.trt.rtx.runner); never at import time.

Decisions:
- Registration is once per process (ORT refuses a second registration under the same
  name), so `load()` is memoised; a failure is an `EpUnavailable` naming what failed, and
  the original error (e.g. "libcuda.so.1: cannot open shared object file": no NVIDIA driver).
- Importing the wheel's package first is required: its `__init__` preloads the bundled
  TensorRT-RTX libraries and ORT's core library that the plugin's dlopen needs.
- A device is an `OrtEpDevice` of this EP (ORT pairs the EP with each GPU it discovered
  that the EP accepts). With none, nothing can be built: the EP 0.5.0 on Linux does not
  honour ORT's "virtual device" settings (issue 23).
"""
from __future__ import annotations

import functools
import importlib
import sys

from trtpipe.trt.rtx.plugin import EP_NAME, INSTALL, import_root, not_installed, package_dir


class EpUnavailable(RuntimeError):
    """The EP cannot be used here; `problem` and `fix` are one sentence each."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(problem)


RTX_MACHINE = ("on a Linux or Windows machine with an RTX GPU (sm86/sm89/sm120/sm121) and the NVIDIA "
               "driver, " + INSTALL)
# Installed, but its libraries do not load: what they need (the plugin links the driver's
# libcuda.so.1 and libnvidia-ml.so.1, and libcudart.so.12, which the wheel does not ship by that name).
LOADABLE = ("on a machine with an RTX GPU (sm86/sm89/sm120/sm121) and the NVIDIA driver, with the CUDA 12 "
            "runtime (libcudart.so.12) on the library path")

NO_DEVICE = "the TensorRT-RTX execution provider loads but lists no GPU device (no RTX GPU is visible here)"
NO_DEVICE_FIX = "on a machine where an RTX GPU (sm86/sm89/sm120/sm121) is visible (nvidia-smi lists it)"


@functools.cache
def load():
    """`onnxruntime` with the EP registered; EpUnavailable when it is not installed or does not load."""
    folder = package_dir()
    if folder is None:
        raise EpUnavailable(not_installed(), RTX_MACHINE)
    root = str(import_root(folder))
    if root not in sys.path:
        sys.path.insert(0, root)
    import onnxruntime as ort

    if not hasattr(ort, "register_execution_provider_library"):
        raise EpUnavailable(f"onnxruntime {ort.__version__} cannot load plugin execution providers",
                            "pip install 'onnxruntime>=1.24'")
    try:
        plugin = importlib.import_module(folder.name)
        ort.register_execution_provider_library(EP_NAME, plugin.get_library_path())
    except Exception as error:  # OSError/RuntimeError from dlopen: e.g. no libcuda.so.1 (no driver)
        detail = " ".join(str(error).split())[:300]
        raise EpUnavailable(f"the TensorRT-RTX execution provider does not load here ({detail})",
                            LOADABLE) from error
    return ort


def devices(ort) -> list:
    """The EP's devices (OrtEpDevice), GPUs only."""
    return [d for d in ort.get_ep_devices()
            if d.ep_name == EP_NAME and d.device.type == ort.OrtHardwareDeviceType.GPU]


def first_device(ort):
    found = devices(ort)
    if not found:
        raise EpUnavailable(NO_DEVICE, NO_DEVICE_FIX)
    return found[0]
