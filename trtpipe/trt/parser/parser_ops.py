"""The TensorRT ONNX parser's operator lists, shipped as data, and which one a build targets.

Each `onnx_parser_ops/<version>.json` is onnx-tensorrt's `docs/operators.md` (operator, Y/N,
supported types, restrictions) at the commit NVIDIA/TensorRT pins for that release, plus
the plugin names of that release's `libnvinfer_plugin` (NVIDIA/TensorRT `plugin/README.md`).
`python -m bench.trt.parser_ops` regenerates them; each file's `source` says where it came from.

Decisions:
- Nothing here imports `tensorrt`: the check runs on machines without it, before a build.
- A version without its own list gets the newest shipped list that is not newer than it
  (ops only get added between releases, so an op is never reported supported when the
  targeted TensorRT lacks it; one added in between may be reported unsupported). Older
  than every list: the oldest. The choice and its reason are recorded in the report.
- No version known (no TensorRT installed, `build.tensorrt_version` unset): the newest list.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from trtpipe.errors import UserError

DATA_DIR = Path(__file__).with_name("onnx_parser_ops")


@dataclass(frozen=True)
class ParserOps:
    """One release's parser support matrix."""

    tensorrt_version: str
    ops: Mapping[str, Mapping]  # op type -> {"supported": bool, "types": [...], "restrictions": str}
    plugins: Mapping[str, list]  # plugin name -> versions registered by libnvinfer_plugin
    source: Mapping
    plugins_source: Mapping
    opset_range: tuple
    selection: str = field(default="", compare=False)  # why this list was chosen for the build

    def has_importer(self, op_type: str) -> bool:
        entry = self.ops.get(op_type)
        return bool(entry and entry["supported"])

    def provenance(self) -> str:
        s = self.source
        return f"{s['repository']} {s['path']} @ {s['commit'][:12]} ({s.get('pinned_by') or s.get('date')})"


def version_key(version: str) -> tuple[int, ...]:
    """"10.16.0.5" -> (10, 16, 0, 5), "10.3.0.post1" -> (10, 3, 0); ValueError without a leading number."""
    match = re.match(r"\d+(\.\d+)*", str(version).strip())
    if match is None:
        raise ValueError(version)
    return tuple(int(part) for part in match.group(0).split("."))


@functools.lru_cache(maxsize=1)
def shipped_versions() -> tuple[str, ...]:
    """Versions with a shipped list, oldest first."""
    return tuple(sorted((p.stem for p in DATA_DIR.glob("*.json")), key=version_key))


@functools.lru_cache(maxsize=None)
def load_list(version: str) -> ParserOps:
    doc = json.loads((DATA_DIR / f"{version}.json").read_text())
    plugins = doc.get("plugins") or {}
    return ParserOps(tensorrt_version=doc["tensorrt_version"], ops=doc["ops"], plugins=plugins.get("names", {}),
                     source=doc["source"], plugins_source=plugins.get("source") or {},
                     opset_range=tuple(doc["opset_range"]))


def list_for(version: str | None, origin: str) -> ParserOps:
    """The list a build for TensorRT `version` is checked against (`origin` says where the version came from)."""
    from dataclasses import replace

    shipped = shipped_versions()
    if version is None:
        chosen = shipped[-1]
        return replace(load_list(chosen), selection=f"no TensorRT version known ({origin}): the newest list, "
                                                    f"TensorRT {chosen}")
    try:
        target = version_key(version)
    except ValueError:
        if origin == "installed":
            return replace(load_list(shipped[-1]), selection=f"installed TensorRT reports the version {version!r}, "
                                                             f"which is no number: the newest list")
        raise UserError(f"build.tensorrt_version is {version!r}, not a version number",
                        f"give the TensorRT version as a quoted string, e.g. build.tensorrt_version='10.16' "
                        f"(lists shipped: {', '.join(shipped)})") from None
    older = [v for v in shipped if version_key(v) <= target]  # (10, 16) <= (10, 16, 0, 72)
    if older:
        chosen = older[-1]
        exact = version_key(chosen) == target[:len(version_key(chosen))]
        why = (f"TensorRT {version} ({origin}): its own list" if exact else
               f"TensorRT {version} ({origin}): the newest shipped list not newer than it, TensorRT {chosen}; "
               f"an op added after {chosen} may be reported unsupported")
    else:
        chosen = shipped[0]
        why = f"TensorRT {version} ({origin}) is older than every shipped list: the oldest, TensorRT {chosen}"
    return replace(load_list(chosen), selection=why)
