"""GPU name, compute capability, driver, CUDA and TensorRT versions: what an engine is valid for.

Decisions:
- Nothing here imports `tensorrt`: its version comes from package metadata (or, for
  a tarball install without metadata, the `__version__` line of its `__init__.py`),
  so the cache key of the build stage costs no TensorRT import on cached runs.
- GPU facts come from `nvidia-smi --query-gpu=name,compute_cap,driver_version`, the
  CUDA runtime version and device count from libcudart (`cudaRuntimeGetVersion`,
  `cudaGetDeviceCount`), loaded through Polygraphy's CUDA wrapper, which knows where
  pip wheels put it. Whatever cannot be found is None, never an exception.
- Computed once per process: the facts do not change while trtpipe runs.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import shutil
import subprocess
from importlib import metadata

from trtpipe.trt.seam import Environment

# Distributions that ship the `tensorrt` Python module (the meta package, then per-CUDA wheels).
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11")
CUDA_RUNTIME_DISTRIBUTIONS = ("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")
_SMI_TIMEOUT = 10


@functools.lru_cache(maxsize=1)
def detect_environment() -> Environment:
    name, capability, driver = nvidia_smi_gpu()
    return Environment(gpu_name=name, compute_capability=capability, driver=driver,
                       cuda=cuda_runtime_version(), tensorrt=tensorrt_version())


def tensorrt_version() -> str | None:
    for distribution in TENSORRT_DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    try:
        spec = importlib.util.find_spec("tensorrt")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    with open(spec.origin, encoding="utf-8", errors="replace") as handle:
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", handle.read(), re.MULTILINE)
    return found.group(1) if found else None


def visible_device_filter() -> str | None:
    """The first entry of CUDA_VISIBLE_DEVICES; "" when it hides every device; None when unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    first = value.split(",")[0].strip()
    return "" if first in ("", "-1") or first.startswith("-") else first


def nvidia_smi_gpu() -> tuple[str | None, str | None, str | None]:
    """(name, compute capability, driver version) of the first visible GPU, from nvidia-smi."""
    device = visible_device_filter()
    smi = shutil.which("nvidia-smi")
    if smi is None or device == "":
        return None, None, None
    command = [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    for selected in ([*command, "-i", device], command) if device else (command,):
        try:
            done = subprocess.run(selected, capture_output=True, text=True, timeout=_SMI_TIMEOUT)
        except (OSError, subprocess.SubprocessError):
            return None, None, None
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == 0 and lines:
            fields = [field.strip() for field in lines[0].split(",")]
            fields += [""] * (3 - len(fields))
            return tuple(f if f and not f.startswith("[") else None for f in fields[:3])  # "[N/A]"
    return None, None, None


def _cudart():
    """The CUDA runtime library via Polygraphy's wrapper (its log silenced), or None."""
    try:
        from polygraphy import cuda
        from polygraphy.logger import G_LOGGER

        with G_LOGGER.verbosity():  # CRITICAL: the wrapper warns loudly when nothing is found
            return cuda.wrapper().handle
    except Exception:  # OSError from ctypes, PolygraphyException from the wrapper
        return None


def cuda_runtime_version() -> str | None:
    library = _cudart()
    if library is not None:
        version = ctypes.c_int(0)
        try:
            if library.cudaRuntimeGetVersion(ctypes.byref(version)) == 0 and version.value:
                return f"{version.value // 1000}.{(version.value % 1000) // 10}"
        except (AttributeError, OSError):
            pass
    for distribution in CUDA_RUNTIME_DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def cuda_device_count() -> int | None:
    """Visible CUDA devices; None when neither libcudart nor nvidia-smi can tell."""
    if visible_device_filter() == "":
        return 0
    library = _cudart()
    if library is not None:
        count = ctypes.c_int(0)
        try:
            status = library.cudaGetDeviceCount(ctypes.byref(count))
        except (AttributeError, OSError):
            status = None
        if status == 0:
            return count.value
        if status is not None:
            return 0  # cudaErrorNoDevice / cudaErrorInsufficientDriver and friends
    name, _, _ = nvidia_smi_gpu()
    return 1 if name else None
