"""Which class each TensorRT Python API member belongs to, per release, from NVIDIA/TensorRT's
binding sources.

    git clone https://github.com/NVIDIA/TensorRT && python -m bench.trt.trt_classes TensorRT

Writes `trtpipe/trt/surface/classes/<wheel version>.json` for the wheels of
trtpipe/trt/surface/ whose release has open binding sources. tests/trt/test_trt_surface.py
then checks `(Class, member)` per class (`engine.get_layer` fails: `get_layer` is
INetworkDefinition's), on top of the module-wide check against the wheel.

Why the sources and not the wheel: the wheel's `tensorrt.so` holds pybind11 signatures only
as templates (`({%}, {str}) -> None`; the `self: tensorrt.tensorrt.ICudaEngine` of a
docstring is filled in at import time), and one class's registration code is spread over
several `.text` regions, so the binary does not tie a member to its class.

How: in python/src/**/*.cpp of the release commit, every `py::class_<T, Bases...>(scope,
"Name", ...)` and `py::enum_<T>(scope, "Name", ...)` statement (up to its `;` outside
brackets, strings and comments) registers the members named by the string first argument
of its `.def*("...")` and `.value("...")` calls; a class also has its bases' members
(template arguments that are registered types). Every member found must be a name of the
wheel's module-wide surface (checked by the test), which ties the sources to the binary.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

# Wheel version (trtpipe/trt/surface/<version>.txt) -> NVIDIA/TensorRT release commit.
# 11.4.0.106 has no open sources in NVIDIA/TensorRT (its newest release is 11.1): it stays module-wide.
RELEASES = {"10.0.1": "d3107c88", "10.8.0.43": "64e56ab6", "10.16.1.11": "52399f55", "11.0.0.114": "771d8efd"}
OUT_DIR = Path(__file__).resolve().parents[2] / "trtpipe" / "trt" / "surface" / "classes"
_REGISTRATION = re.compile(r"py::(class_|enum_)<")
_MEMBER = re.compile(r"\.\s*(?:def\w*|value)\s*\(\s*\"([A-Za-z_][A-Za-z0-9_]*)\"")
_STRING = re.compile(r"\"([A-Za-z_][A-Za-z0-9_]*)\"")


def git(repo: Path, *args: str) -> str:
    return subprocess.check_output(["git", "-C", str(repo), *args], text=True)


def _without_comments(text: str) -> str:
    """C++ text with comments blanked and string contents kept (members are string literals)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: " " * len(m.group(0)), text, flags=re.DOTALL)


def _template_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level template arguments from `start` (just after `<`) and the index after `>`."""
    depth, args, current, index = 1, [], "", start
    while depth:
        char = text[index]
        depth += char == "<"
        depth -= char == ">"
        if depth == 1 and char == ",":
            args.append(current.strip())
            current = ""
        elif depth:
            current += char
        index += 1
    return args + [current.strip()], index


def _statement_end(text: str, start: int) -> int:
    depth, index, in_string = 0, start, False
    while index < len(text):
        char = text[index]
        if in_string:
            if char == "\\":
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == ";" and depth <= 0:
            return index
        index += 1
    return index


def registrations(text: str) -> list[tuple[str, str, list[str], set[str]]]:
    """(C++ type, Python name, C++ template arguments after the first, members) per statement."""
    text = _without_comments(text)
    found = []
    for match in _REGISTRATION.finditer(text):
        args, after = _template_args(text, match.end())
        end = _statement_end(text, after)
        name = _STRING.search(text, after, end)
        if name is None:
            continue  # a type named in a declaration, not a registration
        found.append((_short(args[0]), name.group(1), [_short(a) for a in args[1:]],
                      set(_MEMBER.findall(text, name.end(), end))))
    return found


def _short(cpp_type: str) -> str:
    return cpp_type.split("::")[-1].strip()


def classes_at(repo: Path, commit: str) -> dict[str, dict]:
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", commit, "python/src").split() if f.endswith(".cpp")]
    registered = [r for f in files for r in registrations(git(repo, "show", f"{commit}:{f}"))]
    python_name = {cpp: name for cpp, name, _, _ in registered}
    classes: dict[str, dict] = {}
    for _, name, others, members in registered:
        entry = classes.setdefault(name, {"bases": [], "members": set()})
        entry["bases"] += [python_name[o] for o in others if o in python_name and python_name[o] not in entry["bases"]]
        entry["members"] |= members
    return {name: {"bases": entry["bases"], "members": sorted(entry["members"])}
            for name, entry in sorted(classes.items())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of NVIDIA/TensorRT with its history")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for version, short in RELEASES.items():
        commit = git(args.repo, "rev-parse", short).strip()
        document = {
            "source": {"repository": "NVIDIA/TensorRT", "commit": commit, "paths": "python/src/**/*.cpp",
                       "release": git(args.repo, "log", "-1", "--format=%s", commit).strip(),
                       "licence": "Apache-2.0", "made": datetime.date.today().isoformat(),
                       "method": "python -m bench.trt.trt_classes (see its docstring)"},
            "classes": classes_at(args.repo, commit),
        }
        path = args.out / f"{version}.json"
        path.write_text(json.dumps(document, separators=(",", ":")).replace('},"', '},\n"') + "\n")
        print(f"{version}: {path} ({len(document['classes'])} classes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
