"""The fake GPU the execution provider is shown, in a private mount namespace. FAKE.

ONNX Runtime finds GPUs on Linux by reading `/sys/class/drm/cardN/device/{vendor,device}`
(and the PCI bus id the `device` link resolves to); the TensorRT-RTX plugin offers itself
only for a GPU with NVIDIA's vendor id 0x10de. This machine has no GPU and no
`/sys/class/drm`. The documented way to name a device the process cannot see
(`ep_factory.NvTensorRTRTXExecutionProvider.nv_target_sm`, `allow_virtual_devices`) is
honoured by the 0.5.0 Linux binary only under a Windows sandbox check, and ORT's Python
API cannot pass those entries anyway (issue 23). So the child process that compiles runs
under `unshare -m` (its own mount namespace) where a tmpfs over `/sys/class` holds one entry: `drm/card0/device -> 0000:01:00.0` with vendor 0x10de and
device 0x2684 (an RTX 4090's id). Nothing outside that child sees it; the machine's
/sys is untouched. With `nv_target_sm` set the build makes no driver call
("Using legacy CPU-only mode" in the log) and no engine is ever executed.

Decision (issue 32, item 18): with CAP_SYS_ADMIN (CI's root) the namespace is a mount namespace
alone (`unshare -m`); without it (any other user, or a root without capabilities) it is also a
user namespace in which the user is root (`unshare -Urm`: Linux lets an unprivileged user mount
a tmpfs there), so the oracle and `pytest -m rtx` run without root. The capability, not the
uid, decides: `unshare -m` needs exactly that capability, and a container may give root
CAP_SYS_ADMIN but refuse user namespaces. Files the child writes are the user's own either way
(the user namespace maps only the user's id).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

VENDOR = "0x10de"       # NVIDIA's PCI vendor id: what the plugin matches
DEVICE = "0x2684"       # an RTX 4090 (AD102, sm89); the plugin does not read it
PCI_BUS_ID = "0000:01:00.0"   # what the stand-in libcudart reports (bus 1, device 0)


def write_fake_drm(root: Path) -> Path:
    """Write the fake `drm` folder under `root`; returns it."""
    drm = root / "drm"
    pci = drm / "card0" / PCI_BUS_ID
    pci.mkdir(parents=True, exist_ok=True)
    (pci / "vendor").write_text(VENDOR + "\n")
    (pci / "device").write_text(DEVICE + "\n")
    link = drm / "card0" / "device"
    if not link.is_symlink():
        link.symlink_to(PCI_BUS_ID)
    return drm


def wrap(command: list[str], fake_drm: Path) -> list[str]:
    """`command` run in a private mount namespace that shows `fake_drm` as /sys/class/drm."""
    if shutil.which("unshare") is None:
        raise RuntimeError("unshare not found (util-linux): the fake GPU is shown only in a "
                           "private mount namespace")
    script = ('mount -t tmpfs bench-rtx-fake /sys/class && mkdir /sys/class/drm '
              '&& cp -a "$0"/. /sys/class/drm/ && exec "$@"')
    return [*_unshare(), "sh", "-c", script, str(fake_drm), *command]


CAP_SYS_ADMIN = 21   # linux/capability.h


def _may_mount() -> bool:
    """Whether this process holds CAP_SYS_ADMIN (its effective set, /proc/self/status CapEff)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return os.geteuid() == 0
    found = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff:")), "0")
    return bool(int(found, 16) >> CAP_SYS_ADMIN & 1)


def _unshare() -> list[str]:
    """The namespaces (module doc): a user namespace too without CAP_SYS_ADMIN."""
    user = [] if _may_mount() else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--propagation", "private", "--"]


def unavailable() -> str | None:
    """Why the fake GPU cannot be shown here (None when it can): `unshare` missing, or the
    kernel refusing the namespaces or the tmpfs mount in them (the kernel's own message)."""
    if shutil.which("unshare") is None:
        return "unshare not found (util-linux): the fake GPU is shown only in a private mount namespace"
    try:
        done = subprocess.run([*_unshare(), "sh", "-c", "mount -t tmpfs bench-rtx-probe /sys/class"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare did not run ({exc})"
    if done.returncode != 0:
        how = "unshare -m" if _may_mount() else "unshare -Urm (a user namespace: no CAP_SYS_ADMIN here)"
        return (f"{how} with a tmpfs over /sys/class failed here: "
                f"{(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}")
    return None
