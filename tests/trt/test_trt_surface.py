"""Every TensorRT name trtpipe touches exists in every TensorRT release that can reach it.

The names of each release come from its real bindings wheel (trtpipe/trt/surface/<version>.txt,
made by `python -m bench.trt_surface`; no network here). What trtpipe touches is read from
the AST of trtpipe/trt/*.py:
- `trt.X`, `trt.X.Y`, `getattr(trt, "X")`, `hasattr(trt.X, "Y")` where `trt`/`tensorrt` is the
  module (a parameter or variable of that name, or `import tensorrt`).
- Methods and properties called on TensorRT objects, in the files that import TensorRT
  (`import tensorrt` or `import_tensorrt()`; elsewhere `engine`/`layer` are trtpipe's own
  parsed-JSON objects). The receiver's class is decided by the
  variable's name (RECEIVERS) or by the call that produced it (RETURNS), e.g.
  `layer.get_output(i).dtype` is ITensor.dtype. Polygraphy objects (`runner`, loaders) are not
  TensorRT objects and are not checked here.
- Names reached through Polygraphy on trtpipe's behalf (a `CreateConfig` keyword sets a
  builder flag) are listed in VIA_POLYGRAPHY, from Polygraphy's backend/trt/config.py.
The surface files are module-wide (pybind11's strings do not say which class a member
belongs to), so a member is checked against the whole module and its class separately.
Reachability: legacy `constraints` mode (builder._apply_plan and what only it passes to
Polygraphy) needs 10.x; everything else runs on 10.x and 11.x.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import trtpipe.trt
from trtpipe.trt.builder import POOL_TYPES

TRT_DIR = Path(trtpipe.trt.__file__).parent
SURFACE_DIR = TRT_DIR / "surface"
VERSIONS = sorted((p.stem for p in SURFACE_DIR.glob("*.txt")), key=lambda v: tuple(int(x) for x in v.split(".")))
MODULE_NAMES = ("trt", "tensorrt")
# Variable name -> TensorRT class (Python names; the inspector class is `EngineInspector` in every release).
RECEIVERS = {"network": "INetworkDefinition", "layer": "ILayer", "engine": "ICudaEngine",
             "inspector": "EngineInspector", "tensor": "ITensor"}
# Method -> class of what it returns, for chained access.
RETURNS = {"get_layer": "ILayer", "get_output": "ITensor", "get_input": "ITensor",
           "create_engine_inspector": "EngineInspector"}
# Property -> enum class of its value (pybind11 enums have `.name`/`.value`).
ENUM_PROPERTIES = {"type": "LayerType", "dtype": "DataType", "precision": "DataType"}
# (file, function) pairs only the legacy constraints mode reaches (TensorRT 10.x only).
LEGACY_ONLY = {("builder.py", "_apply_plan")}
# Names Polygraphy touches for trtpipe's CreateConfig/NetworkFromOnnxPath keywords (polygraphy
# backend/trt/config.py, loader.py), and whether only legacy mode passes that keyword.
VIA_POLYGRAPHY = [
    ("tf32=True", ("BuilderFlag", "TF32"), False),
    ("tf32=True", ("IBuilderConfig", "set_flag"), False),
    ("tf32=False (TF32 is on by default)", ("IBuilderConfig", "clear_flag"), False),
    ("fp16=True (legacy)", ("BuilderFlag", "FP16"), True),
    ("bf16=True (legacy)", ("BuilderFlag", "BF16"), True),
    ('precision_constraints="obey" (legacy)', ("BuilderFlag", "OBEY_PRECISION_CONSTRAINTS"), True),
    ("strongly_typed=True", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), False),
    ("profiling_verbosity", ("IBuilderConfig", "profiling_verbosity"), False),
    ("builder_optimization_level", ("IBuilderConfig", "builder_optimization_level"), False),
    ("memory_pool_limits", ("IBuilderConfig", "set_memory_pool_limit"), False),
    ("load_timing_cache", ("IBuilderConfig", "set_timing_cache"), False),
    ("load_timing_cache", ("IBuilderConfig", "create_timing_cache"), False),
    ("profiles", ("IOptimizationProfile", "set_shape"), False),
]


def surface(version: str) -> set[str]:
    lines = (SURFACE_DIR / f"{version}.txt").read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def major(version: str) -> int:
    return int(version.split(".")[0])


@dataclass(frozen=True)
class Use:
    file: str
    line: int
    names: tuple[str, ...]  # (class,) or (class, member)
    legacy_only: bool

    def where(self) -> str:
        return f"trtpipe/trt/{self.file}:{self.line} ({'.'.join(self.names)})"


def _is_module(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in MODULE_NAMES


def _class_of(node: ast.AST) -> str | None:
    """The TensorRT class of an expression's value, when the tables above can tell."""
    if isinstance(node, ast.Name):
        return RECEIVERS.get(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RETURNS:
        if _class_of(node.func.value) is not None:
            return RETURNS[node.func.attr]
    if isinstance(node, ast.Attribute) and node.attr in ENUM_PROPERTIES and _class_of(node.value) is not None:
        return ENUM_PROPERTIES[node.attr]
    if isinstance(node, ast.Attribute) and _is_module(node.value) and not node.attr.startswith("__"):
        return node.attr  # trt.X used as a value: X is a class or enum
    return None


def uses_tensorrt(tree: ast.AST) -> bool:
    """A file that imports `tensorrt` or calls `import_tensorrt()`: only there are `engine`, `layer`... TensorRT's."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tensorrt" for a in node.names):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "import_tensorrt":
            return True
    return False


def _uses_in(tree: ast.AST, file: str) -> list[Use]:
    uses: list[Use] = []
    receivers = uses_tensorrt(tree)

    def visit(node: ast.AST, legacy: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            legacy = legacy or (file, node.name) in LEGACY_ONLY
        if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
            if _is_module(node.value):
                uses.append(Use(file, node.lineno, (node.attr,), legacy))
            elif receivers:
                owner = _class_of(node.value)
                if owner is not None and not (owner in ENUM_PROPERTIES.values() and node.attr in ("name", "value")):
                    uses.append(Use(file, node.lineno, (owner, node.attr), legacy))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            target, name = node.args[0], node.args[1].value
            if name.startswith("__"):
                pass  # the module's own __version__, not a binding
            elif _is_module(target):
                uses.append(Use(file, node.lineno, (name,), legacy))
            elif isinstance(target, ast.Attribute) and _is_module(target.value):
                uses.append(Use(file, node.lineno, (target.attr, name), legacy))
            elif receivers and _class_of(target) is not None:
                uses.append(Use(file, node.lineno, (_class_of(target), name), legacy))
        for child in ast.iter_child_nodes(node):
            visit(child, legacy)

    visit(tree, False)
    return uses


def trtpipe_uses() -> list[Use]:
    uses = []
    for path in sorted(TRT_DIR.glob("*.py")):
        uses += _uses_in(ast.parse(path.read_text()), path.name)
    # builder._pool: getattr(trt.MemoryPoolType, name.upper()) for each name trtpipe accepts.
    uses += [Use("builder.py", 0, ("MemoryPoolType", name.upper()), False) for name in POOL_TYPES]
    uses += [Use(f"builder.py via Polygraphy {keyword}", 0, names, legacy) for keyword, names, legacy in VIA_POLYGRAPHY]
    return uses


def missing_names(uses: list[Use], versions: list[str]) -> list[str]:
    problems = []
    for version in versions:
        names = surface(version)
        for use in uses:
            if use.legacy_only and major(version) >= 11:
                continue
            absent = [name for name in use.names if name not in names]
            if absent:
                problems.append(f"{use.where()}: {', '.join(absent)} missing in TensorRT {version}")
    return problems


def test_the_surface_covers_the_supported_releases():
    assert {major(v) for v in VERSIONS} == {10, 11}
    assert VERSIONS[0].startswith("10.0.") and "11.4.0.106" in VERSIONS
    for version in VERSIONS:
        text = (SURFACE_DIR / f"{version}.txt").read_text()
        assert f"tensorrt_cu12_bindings-{version}-" in text.splitlines()[0] and "sha256" in text
        assert len(surface(version)) > 1000


def test_the_scan_finds_what_trtpipe_touches():
    found = {use.names for use in trtpipe_uses()}
    for expected in [("LayerInformationFormat",), ("ProfilingVerbosity",), ("ILayer", "set_output_type"),
                     ("ICudaEngine", "get_tensor_profile_shape"), ("EngineInspector", "get_engine_information"),
                     ("ITensor", "dtype"), ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"),
                     ("INetworkDefinition", "get_layer"), ("TensorIOMode",)]:
        assert expected in found, expected
    legacy = {use.names for use in trtpipe_uses() if use.legacy_only}
    assert ("ILayer", "precision") in legacy and ("ICudaEngine", "create_engine_inspector") not in legacy


def test_every_name_trtpipe_touches_exists_in_every_release_that_reaches_it():
    assert missing_names(trtpipe_uses(), VERSIONS) == []


def test_a_name_removed_in_11_fails_when_reachable_there():
    """The check can fail: the legacy setters, if reachable in strongly typed mode, are reported."""
    uses = [Use("builder.py", 7, ("ILayer", "set_output_type"), False), Use("x.py", 9, ("BuilderFlag", "FP16"), True)]
    problems = missing_names(uses, VERSIONS)
    assert problems == [f"trtpipe/trt/builder.py:7 (ILayer.set_output_type): set_output_type missing in TensorRT {v}"
                        for v in VERSIONS if major(v) >= 11]
    assert missing_names([Use("a.py", 1, ("NoSuchEnum", "X"), False)], VERSIONS[:1]) == \
        [f"trtpipe/trt/a.py:1 (NoSuchEnum.X): NoSuchEnum, X missing in TensorRT {VERSIONS[0]}"]


@pytest.mark.parametrize("file", ["fake_tensorrt.py", "tiny.py", "parser_models.py"])
def test_the_test_double_exposes_no_tensorrt_name_the_bindings_lack(file):
    """The double stands at trtpipe's seam, above TensorRT: any TensorRT name it used would have to be real."""
    path = Path(__file__).parent / file
    uses = _uses_in(ast.parse(path.read_text()), file)
    assert missing_names(uses, VERSIONS) == []
    imports = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("tensorrt" == (getattr(n, "module", None) or "") or
                   any(a.name.split(".")[0] == "tensorrt" for a in n.names) for n in imports)
