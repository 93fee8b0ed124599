"""The corpus: ONNX's backend test models with their input tensors, found or generated.

Layout (as `onnx/backend/test/data` has it):
- `node/<test>/model.onnx` with `test_data_set_0/input_<i>.pb` and `output_<i>.pb`;
- `light/light_<net>.onnx` (no inputs stored: ONNX's own runner feeds
  `arange(n) / n` with dynamic dimensions set to 1, and so does `light_feeds`).

Decisions:
- Recent onnx wheels (1.23 here) ship the `light` models but no longer the
  `node` data; they do ship the Python cases that generate it
  (`onnx.backend.test.case.node`). When the data directory has no `node/`,
  `ensure_node_data` writes the cases once into a cache directory keyed by the
  onnx version, in the same layout, so the corpus is always the installed
  onnx's own.
- `node_cases(modules)` generates only the cases of the given case modules
  (importing a module runs its exporters): the test subset needs about 30
  models, not the 11 s it takes to generate all of them.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.onnxmodel import input_dims

KINDS = ("node", "light")


@dataclass(frozen=True)
class CaseRef:
    """One model of the corpus; `data_dir` is None for the light models."""

    kind: str
    name: str
    model: str
    data_dir: str | None


def installed_data_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def default_node_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trtpipe" / f"onnx-{onnx.__version__}-backend-data"


def list_cases(data_dir: Path | None = None, kinds=KINDS) -> list[CaseRef]:
    """Every case of `kinds`, sorted by name; node data is generated when absent."""
    data_dir = Path(data_dir) if data_dir else installed_data_dir()
    cases = []
    if "node" in kinds:
        node_dir = data_dir / "node" if (data_dir / "node").is_dir() else ensure_node_data(default_node_cache())
        for case_dir in sorted(p for p in node_dir.iterdir() if (p / "model.onnx").is_file()):
            cases.append(CaseRef("node", case_dir.name, str(case_dir / "model.onnx"),
                                 str(case_dir / "test_data_set_0")))
    if "light" in kinds:
        light_dir = installed_data_dir() / "light" if not (data_dir / "light").is_dir() else data_dir / "light"
        for model in sorted(light_dir.glob("light_*.onnx")):
            cases.append(CaseRef("light", model.stem, str(model), None))
    return cases


def ensure_node_data(root: Path) -> Path:
    """`root/node` holding every node case of the installed onnx (written once)."""
    node_dir = root / "node"
    done = root / "complete"
    if not done.is_file():
        from onnx.backend.test.case import node

        write_cases(node.collect_testcases(), node_dir)
        done.write_text(onnx.__version__ + "\n")
    return node_dir


def node_cases(modules: list[str]) -> list:
    """The node cases of the case modules `modules` (e.g. "abs", "resize"), generated now."""
    from onnx.backend.test.case import node

    for module in modules:
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    return list(node._NodeTestCases)


def write_cases(cases, node_dir: Path) -> None:
    """Write cases in the backend layout (after `onnx.backend.test.cmd_tools`); first data set only."""
    for case in cases:
        case_dir = node_dir / case.name
        data_dir = case_dir / "test_data_set_0"
        data_dir.mkdir(parents=True, exist_ok=True)
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        for prefix, values, infos in (("input", inputs, case.model.graph.input),
                                      ("output", outputs, case.model.graph.output)):
            for index, (value, info) in enumerate(zip(values, infos)):
                proto = _to_proto(value, info)
                (data_dir / f"{prefix}_{index}.pb").write_bytes(proto.SerializeToString())


def _to_proto(value, info: onnx.ValueInfoProto):
    if info.type.HasField("sequence_type"):
        return numpy_helper.from_list(value, info.name)
    if info.type.HasField("optional_type"):
        return numpy_helper.from_optional(value, info.name)
    if info.type.HasField("map_type"):
        return numpy_helper.from_dict(value, info.name)
    return value if isinstance(value, onnx.TensorProto) else numpy_helper.from_array(value, info.name)


def case_feeds(case: CaseRef, model: onnx.ModelProto) -> dict:
    """Input name -> value (array, list for a sequence, None for an empty optional)."""
    inputs = [value for value in model.graph.input
              if value.name not in {t.name for t in model.graph.initializer}]
    if case.data_dir is None:
        return light_feeds(inputs)
    feeds = {}
    for index, info in enumerate(inputs):
        path = Path(case.data_dir) / f"input_{index}.pb"
        if path.is_file():
            feeds[info.name] = _read_value(path.read_bytes(), info.type)
    return feeds


def light_feeds(inputs) -> dict:
    feeds = {}
    for info in inputs:
        shape = input_dims.example_shape(input_dims.dims(info) or [])  # dynamic (-1, 0, dim_param): 1
        count = int(np.prod(shape))
        feeds[info.name] = (np.arange(count).reshape(shape) / count).astype(np.float32)
    return feeds


def _read_value(data: bytes, type_proto: onnx.TypeProto):
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    if type_proto.HasField("map_type"):
        proto = onnx.MapProto()
        proto.ParseFromString(data)
        return numpy_helper.to_dict(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)
