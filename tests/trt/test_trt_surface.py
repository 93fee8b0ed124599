"""Every TensorRT name trtpipe touches exists in every TensorRT release that can reach it.

The names of each release come from its real bindings wheel (trtpipe/trt/surface/<version>.txt,
made by `python -m bench.trt.trt_surface`; no network here). What trtpipe touches is read from
the AST of trtpipe/trt/*.py:
- `trt.X`, `trt.X.Y`, `getattr(trt, "X")`, `hasattr(trt.X, "Y")` where `trt`/`tensorrt` is the
  module (a parameter or variable of that name, or `import tensorrt`).
- Methods and properties called on TensorRT objects, in the files that import TensorRT
  (`import tensorrt`, `from tensorrt import`, or `import_tensorrt()`; elsewhere `engine`/`layer`
  are trtpipe's own parsed-JSON objects), classified by tests/trt/trt_uses.py: the receiver's
  class comes from its assignment (`ctx = engine.create_execution_context()`, `eng = engine`,
  `t = trt`, `from tensorrt import X`, `runner.engine`), else from its variable name. The scan
  is strict: an attribute of a receiver it can neither classify nor find in the documented
  allow-list of non-TensorRT receivers (NOT_TENSORRT: Python objects, Polygraphy's runner and
  loaders, trtpipe's dataclasses) fails the test naming file:line (a loop variable `lay`, an
  unmapped method's result), so a TensorRT access cannot escape the check by its spelling.
- Names reached through Polygraphy on trtpipe's behalf (a `CreateConfig` keyword sets a
  builder flag) are listed in VIA_POLYGRAPHY, from Polygraphy's backend/trt/config.py.
Per class: where NVIDIA/TensorRT publishes the release's binding sources (10.0, 10.8, 10.16,
11.0; surface/classes/, made by `python -m bench.trt.trt_classes`), a `(Class, member)` use must
also be a member of that class or its bases (`engine.get_layer` fails: INetworkDefinition's).
Every member those files list is in the same release's wheel surface (tested), which ties the
sources to the binaries. 11.4.0.106 has no open sources and is checked module-wide only.
The wheels alone cannot be split per class: pybind11 stores signatures as templates
(`({%}, {str}) -> None`, the class filled in at import time, so `(self:
tensorrt.tensorrt.ICudaEngine, ...)` is in no wheel), and the code that registers one class's
members is spread over several regions of `.text` (10.16.1.11: ICudaEngine's `num_layers` at
0xb74ae, its `get_tensor_profile_shape` at 0x203a72, next to other classes' names).
Reachability: legacy `constraints` mode (builder._apply_plan and what only it passes to
Polygraphy) needs 10.x; everything else runs on 10.x and 11.x.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import trtpipe.trt
from tests.trt.trt_uses import Scanner, Use
from trtpipe.trt.builder import POOL_TYPES

TRT_DIR = Path(trtpipe.trt.__file__).parent
SURFACE_DIR = TRT_DIR / "surface"
CLASSES_DIR = SURFACE_DIR / "classes"
VERSIONS = sorted((p.stem for p in SURFACE_DIR.glob("*.txt")), key=lambda v: tuple(int(x) for x in v.split(".")))
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


def _uses_in(tree: ast.AST, file: str) -> list[Use]:
    return Scanner(file, LEGACY_ONLY).scan(tree).uses


def unknown_receivers(tree: ast.AST, file: str) -> list[str]:
    return Scanner(file, LEGACY_ONLY).scan(tree).unknown


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
        names, classes = surface(version), class_surface(version)
        for use in uses:
            if use.legacy_only and major(version) >= 11:
                continue
            absent = [name for name in use.names if name not in names]
            if absent:
                problems.append(f"{use.where()}: {', '.join(absent)} missing in TensorRT {version}")
            elif len(use.names) == 2 and classes and not _is_member(classes, *use.names):
                problems.append(f"{use.where()}: {use.names[1]} is no member of {use.names[0]} in TensorRT {version}")
    return problems


def class_surface(version: str) -> dict[str, dict] | None:
    """Class -> {bases, members} from the release's binding sources (bench/trt/trt_classes.py), if open."""
    path = CLASSES_DIR / f"{version}.json"
    return json.loads(path.read_text())["classes"] if path.exists() else None


def _is_member(classes: dict[str, dict], owner: str, member: str) -> bool:
    if owner not in classes:
        return False
    return member in classes[owner]["members"] or any(_is_member(classes, base, member)
                                                      for base in classes[owner]["bases"])


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


def test_every_attribute_in_the_tensorrt_files_has_a_receiver_the_scan_can_classify():
    unknown = [problem for path in sorted(TRT_DIR.glob("*.py"))
               for problem in unknown_receivers(ast.parse(path.read_text()), path.name)]
    assert unknown == []


SPELLINGS = '''
import tensorrt
import tensorrt as t2
from tensorrt import NoSuchClass


def run(engine, layers, runner):
    ctx = engine.create_execution_context()
    ctx.no_such_context_member
    eng = engine
    eng.no_such_engine_member
    t = tensorrt
    t.NoSuchEnum
    t2.NoSuchEnum2
    NoSuchClass.MEMBER
    runner.engine.no_such_runner_engine_member
    for lay in layers:
        lay.precision
    engine.unmapped_method().dtype
    engine = runner
    engine.set_profile(0)
'''


def test_aliases_returns_and_polygraphy_attributes_are_followed_and_the_rest_fails():
    tree = ast.parse(SPELLINGS)
    found = {use.names: use.line for use in _uses_in(tree, "spellings.py")}
    lines = SPELLINGS.splitlines()
    for names, fragment in [(("IExecutionContext", "no_such_context_member"), "ctx.no_such"),
                            (("ICudaEngine", "no_such_engine_member"), "eng.no_such"),
                            (("NoSuchEnum",), "t.NoSuchEnum"), (("NoSuchEnum2",), "t2.NoSuchEnum2"),
                            (("NoSuchClass",), "from tensorrt import"),
                            (("NoSuchClass", "MEMBER"), "NoSuchClass.MEMBER"),
                            (("ICudaEngine", "no_such_runner_engine_member"), "runner.engine"),
                            (("ICudaEngine", "create_execution_context"), "ctx = ")]:
        assert names in found and fragment in lines[found[names] - 1], names
    assert ("ICudaEngine", "set_profile") not in found  # `engine` rebound to Polygraphy's runner
    assert unknown_receivers(tree, "spellings.py") == [
        f"trtpipe/trt/spellings.py:{lines.index('        lay.precision') + 1}: the TensorRT class of `lay` "
        "(for .precision) is unknown",
        f"trtpipe/trt/spellings.py:{lines.index('    engine.unmapped_method().dtype') + 1}: the TensorRT class of "
        "`engine.unmapped_method()` (for .dtype) is unknown"]
    problems = missing_names(_uses_in(tree, "spellings.py"), VERSIONS[:1])
    assert any("(IExecutionContext.no_such_context_member): no_such_context_member missing" in p for p in problems)


def test_the_per_class_surfaces_agree_with_the_wheels_and_catch_a_member_of_another_class():
    with_classes = [v for v in VERSIONS if class_surface(v) is not None]
    assert {major(v) for v in with_classes} == {10, 11} and VERSIONS[0] in with_classes
    for version in with_classes:
        classes, names = class_surface(version), surface(version)
        assert {m for entry in classes.values() for m in entry["members"]} <= names, version
        assert set(classes) <= names and _is_member(classes, "IConvolutionLayer", "name")  # inherited from ILayer
    uses = [Use("runner.py", 3, ("ICudaEngine", "get_layer"), False),
            Use("parse.py", 4, ("INetworkDefinition", "get_layer"), False)]
    assert missing_names(uses, VERSIONS) == [f"trtpipe/trt/runner.py:3 (ICudaEngine.get_layer): get_layer is no member "
                                             f"of ICudaEngine in TensorRT {v}" for v in with_classes]
