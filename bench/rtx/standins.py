"""Stand-in CUDA libraries, compiled with gcc at run time into a temporary folder. FAKE.

The TensorRT-RTX plugin (`libonnxruntime_providers_nv_tensorrt_rtx.so`) links
`libcuda.so.1`, `libnvidia-ml.so.1` (the NVIDIA driver) and `libcudart.so.12` (the CUDA
runtime; the wheel ships only `libcudart.so.12.9.79`, which itself needs the driver).
On a machine without the driver the plugin does not load, and without a CUDA device it
lists no device to compile for. The stand-ins make it load and list one device:

- `libcuda.so.1`, `libnvidia-ml.so.1`: every call answers "no device" / "driver not loaded".
- `libcudart.so.12`: one device of compute capability 8.9 (values in standins/cudart.c);
  calls that need a real device (memory, streams, events, graphs) answer "no device".

Which functions: every `cu*` / `cuda*` / `nvml*` symbol the plugin and its bundled
libraries import (`nm -D --undefined-only`), so a new wheel's imports are covered without
editing the C files; the hand-written ones are in `standins/*.c`, the rest are generated
stubs that return the library's "no device" code (an x86-64 int function that ignores its
arguments). Nothing here is used by trtpipe; only the bench/rtx oracle's child process
loads these libraries, and it runs no engine.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent / "standins"


@dataclass(frozen=True)
class StandIn:
    soname: str
    source: str          # hand-written part, in standins/
    prefix: re.Pattern   # which imported symbols belong to this library
    error_code: int      # what a generated stub returns
    version_node: str    # symbol version the importer asks for ('' when unversioned)


STAND_INS = (
    StandIn("libcudart.so.12", "cudart.c", re.compile(r"^cuda[A-Z]"), 100, "libcudart.so.12"),
    StandIn("libcuda.so.1", "cuda.c", re.compile(r"^cu[A-Z]"), 100, ""),
    StandIn("libnvidia-ml.so.1", "nvml.c", re.compile(r"^nvml[A-Z]"), 9, ""),
)

# The plugin and the bundled libraries that link the driver or the runtime.
IMPORTERS = ("libonnxruntime_providers_nv_tensorrt_rtx.so", "libtensorrt_plugins.so", "libtensorrt_shim.so")


def imported_symbols(package_dir: Path) -> set[str]:
    """Undefined dynamic symbols of the plugin's libraries, without their version suffix."""
    names: set[str] = set()
    for lib in IMPORTERS:
        path = package_dir / lib
        if not path.is_file():
            continue
        out = subprocess.run(["nm", "-D", "--undefined-only", str(path)], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[-2] == "U":
                names.add(parts[-1].split("@")[0])
    return names


def _defined(source: str) -> set[str]:
    return set(re.findall(r"^[A-Za-z_][\w \*]*?\b(\w+)\(", source, re.M))


def generated_source(stand_in: StandIn, imported: set[str]) -> tuple[str, list[str]]:
    """The hand-written C file plus a stub for each imported symbol it lacks."""
    source = (HERE / stand_in.source).read_text()
    wanted = sorted(n for n in imported if stand_in.prefix.match(n))
    missing = [n for n in wanted if n not in _defined(source)]
    stubs = "".join(f"int {n}(void) {{ return {stand_in.error_code}; }}\n" for n in missing)
    return source + "\n/* generated stubs: no device */\n" + stubs, wanted


def build(package_dir: Path, out_dir: Path) -> dict[str, int]:
    """Compile the three stand-ins into `out_dir`; returns how many functions each exports."""
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc not found: the stand-in CUDA libraries are compiled at run time "
                           "(apt-get install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    imported = imported_symbols(package_dir)
    counts = {}
    for s in STAND_INS:
        source, wanted = generated_source(s, imported)
        c_file = out_dir / (s.soname + ".c")
        c_file.write_text(source)
        cmd = ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out_dir / s.soname), str(c_file),
               f"-Wl,-soname,{s.soname}"]
        if s.version_node:
            # The plugin asks for `cudaX@libcudart.so.12`: define that version node.
            script = out_dir / (s.soname + ".map")
            script.write_text(f"{s.version_node} {{ global: *; }};\n")
            cmd.append(f"-Wl,--version-script={script}")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"gcc failed on {c_file}: {done.stderr.strip()[:500]}")
        counts[s.soname] = len(wanted)
    return counts


def preload(out_dir: Path) -> str:
    """An LD_PRELOAD value that loads the compiled stand-ins first in a process that does not
    load them itself (trtpipe's own tensorrt_rtx child process, in tests/test_rtx_oracle.py):
    the plugin's DT_NEEDED sonames then resolve to them."""
    return ":".join(str(out_dir / s.soname) for s in STAND_INS)
