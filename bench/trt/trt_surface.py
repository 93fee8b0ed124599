"""Extract the Python API surface of real TensorRT releases from their bindings wheels.

    python -m bench.trt.trt_surface                      # the default versions
    python -m bench.trt.trt_surface 10.0.1 11.4.0.106    # chosen versions
    python -m bench.trt.trt_surface --wheels DIR         # wheels already downloaded to DIR

Writes `trtpipe/trt/surface/<version>.txt`: one name a line, with a header saying which
wheel (file name, sha256), when, and how. tests/trt/test_trt_surface.py checks every
TensorRT attribute trtpipe touches against these files, without network.

How the names are found (the wheel ships no .pyi stubs, and its `tensorrt.so` cannot be
imported without libnvinfer): pybind11 registers every class, method, property, enum
member and argument name as a C string (`py::class_<ILayer>(m, "ILayer")`,
`.def_property("precision", ...)`, `.value("STRONGLY_TYPED", ...)`), which the compiled
code loads with a RIP-relative `lea reg, [rip+disp32]` (x86-64: REX.W 0x48/0x4C, 0x8D,
ModRM with mod=00 rm=101). We scan `.text` for that instruction pattern, keep targets
inside `.rodata`, read the NUL-terminated string at each target and keep those that are
Python identifiers. Reading from the *referenced address* (not `strings`) matters: the
linker merges string tails, so "set_output_type" lives inside "reset_output_type" and
"precision" inside "compute_precision"; `strings` would miss both.

Limits (documented in the test too): the set is module-wide, not per class (pybind11's
strings do not say which class a method belongs to), and it over-approximates (argument
names such as "index" are in it, and a byte pattern can hit mid-instruction). A name
*absent* from a version's file is therefore reliably absent from that version's
bindings; a present name is present somewhere in the module. Cross-checked against
`objdump -d` (10.16.1.11 by hand; for 11.4.0.106 the lea targets give the same 1378
names): the removed-in-11 names (`set_output_type`, `precision`,
`OBEY_PRECISION_CONSTRAINTS`, `FP16`) are in the 10.x files and absent from the 11.x ones.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "tensorrt-cu12-bindings"
# 10.0.x (first 10.x), a middle 10.x, the last 10.x, the first 11.x and 11.4 (what the index offers on
# 2026-11-23: 10.0.1 ... 10.16.1.11, 11.0.0.114 ... 11.4.0.106).
DEFAULT_VERSIONS = ("10.0.1", "10.8.0.43", "10.16.1.11", "11.0.0.114", "11.4.0.106")
OUT_DIR = Path(__file__).resolve().parents[2] / "trtpipe" / "trt" / "surface"
_LEA_RIP = re.compile(rb"[\x48\x4c]\x8d[\x05\x0d\x15\x1d\x25\x2d\x35\x3d]")
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\Z")


def elf_sections(data: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name -> (address, file offset, size) of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]

    def name(offset: int) -> str:
        start = names_offset + offset
        return data[start:data.index(b"\0", start)].decode()

    return {name(h[0]): (h[3], h[4], h[5]) for h in headers}


def exposed_names(so_bytes: bytes) -> set[str]:
    """Identifier strings the extension's code references (see the module docstring)."""
    sections = elf_sections(so_bytes)
    text_addr, text_off, text_size = sections[".text"]
    ro_addr, ro_off, ro_size = sections[".rodata"]
    text = so_bytes[text_off:text_off + text_size]
    names = set()
    for match in _LEA_RIP.finditer(text):
        (disp,) = struct.unpack_from("<i", text, match.start() + 3)
        target = text_addr + match.start() + 7 + disp
        if ro_addr <= target < ro_addr + ro_size:
            start = ro_off + target - ro_addr
            string = so_bytes[start:so_bytes.index(b"\0", start)]
            if _IDENTIFIER.match(string):
                names.add(string.decode())
    return names


def download(version: str, directory: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                    "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "-d", str(directory), f"{PACKAGE}=={version}"],
                   check=True)
    return wheel_for(version, directory)


def wheel_for(version: str, directory: Path) -> Path:
    found = sorted(Path(directory).glob(f"{PACKAGE.replace('-', '_')}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"no {PACKAGE} {version} wheel in {directory}")
    return found[0]


def surface_file(version: str, wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        so_name = next(n for n in archive.namelist() if re.search(r"tensorrt[^/]*\.so$", n))
        names = exposed_names(archive.read(so_name))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    header = [
        f"# TensorRT {version} Python API names, from {wheel.name} ({so_name})",
        f"# wheel sha256 {sha}",
        f"# made {datetime.date.today().isoformat()} by `python -m bench.trt.trt_surface` "
        "(identifier strings referenced by RIP-relative lea in .text; see its docstring)",
        f"# {len(names)} names",
    ]
    return "\n".join(header + sorted(names)) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--wheels", type=Path, help="directory with the wheels (default: download to a temp dir)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temp:
        for version in args.versions:
            wheel = wheel_for(version, args.wheels) if args.wheels else download(version, Path(temp))
            (args.out / f"{version}.txt").write_text(surface_file(version, wheel))
            print(f"{version}: {args.out / f'{version}.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
