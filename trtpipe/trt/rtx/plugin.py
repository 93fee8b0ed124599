"""Where the TensorRT-RTX execution provider wheel is, and which versions it holds.

Decisions:
- Found as the installed `onnxruntime_ep_nv_tensorrt_rtx` package (`pip install onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0`),
  or, when `$TRTPIPE_RTX_HOME` is set, in that folder (a `pip install --target` folder: how the
  bench/rtx oracle keeps the wheel out of the environment). The variable wins, so one run can
  name exactly which EP it builds with.
- Versions are read from files, never by importing or loading anything: the EP's
  `_version.py` and the bundled `libtensorrt_rtx.so.<x.y.z>`, so a cached run's key costs no
  library load.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

DISTRIBUTION = "onnxruntime-ep-nv-tensorrt-rtx-cu12"
PINNED = "0.5.0"  # the version trtpipe is tested with (pyproject's `rtx` extra pins it)
PACKAGE = "onnxruntime_ep_nv_tensorrt_rtx"
PLUGIN = "libonnxruntime_providers_nv_tensorrt_rtx.so"
EP_NAME = "NvTensorRTRTXExecutionProvider"
HOME_VARIABLE = "TRTPIPE_RTX_HOME"
INSTALL = f"pip install {DISTRIBUTION}=={PINNED} (CUDA 12; from a trtpipe clone: pip install '.[rtx]')"


def package_dir() -> Path | None:
    """The EP package's folder, or None when it is not installed (or $TRTPIPE_RTX_HOME lacks it)."""
    home = os.environ.get(HOME_VARIABLE)
    if home:
        folder = Path(home).expanduser() / PACKAGE
        return folder if (folder / PLUGIN).is_file() else None
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / PLUGIN).is_file() else None


def not_installed() -> str:
    """The problem sentence when package_dir() is None (naming $TRTPIPE_RTX_HOME when it is set)."""
    home = os.environ.get(HOME_VARIABLE)
    where = f" in ${HOME_VARIABLE} ({home})" if home else ""
    return f"the TensorRT-RTX execution provider ({DISTRIBUTION}) is not installed{where}"


def import_root(folder: Path) -> Path:
    """What to put on sys.path so that `import onnxruntime_ep_nv_tensorrt_rtx` finds `folder`."""
    return folder.parent


def ep_version(folder: Path | None) -> str | None:
    version_file = folder / "_version.py" if folder else None
    if version_file is None or not version_file.is_file():
        return None
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_file.read_text())
    return found.group(1) if found else None


def tensorrt_rtx_version(folder: Path | None) -> str | None:
    """The bundled TensorRT-RTX library's version, from its file name (libtensorrt_rtx.so.1.7.1)."""
    if folder is None:
        return None
    versions = []
    for path in folder.glob("libtensorrt_rtx.so.*"):
        found = re.fullmatch(r"libtensorrt_rtx\.so\.(\d+(?:\.\d+)*)", path.name)
        if found:
            versions.append(tuple(int(p) for p in found.group(1).split(".")))
    return ".".join(map(str, max(versions, key=lambda v: (len(v), v)))) if versions else None
