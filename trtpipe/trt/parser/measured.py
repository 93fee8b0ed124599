"""What a real TensorRT-family ONNX parser accepted, measured: TensorRT-RTX 1.7.1, op by op and
element type by element type (`onnx_parser_ops_measured/tensorrt_rtx-1.7.1.json`, written by
`python -m bench.rtx --ops`: single-op models compiled ahead of time by NVIDIA's TensorRT-RTX
execution provider; docs/rtx-parser.md shows where it differs from the documented lists).

Decisions:
- It corrects the *documented* lists (onnx_parser_ops/) only for targets of the same
  generation: TensorRT 11 and later, strongly typed only like TensorRT-RTX, whose ONNX parser
  comes from the same onnx-tensorrt line. For TensorRT 10.x the documentation stays the
  evidence: an older parser may lack what 1.7.1 has.
- A measured refusal counts against a type only when the same op's FP32 model built: then it
  is the type that was refused, not the single-op model's shapes or attributes.
- Nothing here imports `tensorrt` or the EP: the table is data.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Mapping

DATA = Path(__file__).with_name("onnx_parser_ops_measured") / "tensorrt_rtx-1.7.1.json"
REFUSED = ("refused by the parser", "refused by the EP", "parsed, refused by the builder", "not on the EP")
FIRST_MAJOR = 11   # the TensorRT generation the measurement speaks for (see the module doc)


@functools.lru_cache(maxsize=1)
def table() -> Mapping:
    return json.loads(DATA.read_text())


def label() -> str:
    doc = table()
    return f"{doc['product']} {doc['version']}"


def applies_to(tensorrt_version: str) -> bool:
    from trtpipe.trt.parser.parser_ops import version_key

    try:
        return version_key(tensorrt_version)[0] >= FIRST_MAJOR
    except ValueError:
        return False


def _entry(op_type: str, type_name: str) -> Mapping | None:
    return (table()["ops"].get(op_type) or {}).get("types", {}).get(type_name)


def built(op_type: str, type_name: str) -> bool:
    entry = _entry(op_type, type_name)
    return bool(entry and entry["verdict"] == "built")


def type_refusal(op_type: str, type_name: str) -> str | None:
    """The measured reason when the op was refused in this type while its FP32 model built; else None."""
    entry = _entry(op_type, type_name)
    if type_name == "FP32" or not entry or entry["verdict"] not in REFUSED or not built(op_type, "FP32"):
        return None
    return f"{entry['verdict']}: {entry.get('reason', '')}".strip()
