"""Build a serialized engine with Polygraphy's loaders; needs TensorRT and a GPU.

APIs used, and where they were checked (Polygraphy 0.53.6 source in site-packages,
TensorRT docs):
- `NetworkFromOnnxPath(path, strongly_typed=True)`: Polygraphy's loader takes
  `strongly_typed` and sets `NetworkDefinitionCreationFlag.STRONGLY_TYPED` itself
  (backend/trt/loader.py, CreateNetwork). Its `flags=` argument is a list of
  *OnnxParserFlag*s, not network creation flags. On TensorRT 11 the creation flag is
  "deprecated ... retained for API compatibility but ignored" (NvInfer.h 11.x), so it
  is passed only when the enum still has it.
- `LoadPlugins(plugins=[...], obj=loader)`: loads each library with ctypes before the
  wrapped loader (the parser) runs.
- `PostprocessNetwork(network, func, name)`: calls `func(network=...)` (legacy mode).
- `CreateConfig(tf32, fp16, bf16, profiles=[Profile], precision_constraints="obey",
  load_timing_cache=path, profiling_verbosity, memory_pool_limits={MemoryPoolType: bytes},
  builder_optimization_level)`: backend/trt/config.py.
- Build log: Polygraphy's logger (and TensorRT's, which Polygraphy forwards to it, INFO as VERBOSE)
  prints to sys.stdout at call time, so it is captured at VERBOSE with redirect_stdout.
- `EngineBytesFromNetwork(network, config, save_timing_cache=path)` merges the timing
  cache under a file lock; `EngineFromBytes(bytes)` deserializes.
- `engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)`
  (TensorRT Python API "EngineInspector"; Polygraphy tools/inspect extractors/_trt.py).
- Layer API for legacy mode: `network.num_layers`, `network.get_layer(i)`, `layer.name`,
  `layer.metadata`, `layer.type`, `layer.num_outputs`, `layer.get_output(i).dtype`,
  `layer.precision = ...`, `layer.set_output_type(i, dtype)` (TensorRT python/src/infer/
  pyGraph.cpp; the setters are deprecated since 10.12 and removed in 11.x).
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Mapping
from pathlib import Path

from trtpipe.errors import StageFailed, UserError
from trtpipe.trt.availability import import_tensorrt
from trtpipe.trt.legacy import LayerView, constraints_summary, legacy_constraints
from trtpipe.trt.seam import BuildOptions, BuildResult

POOL_TYPES = ("workspace", "dla_managed_sram", "dla_local_dram", "dla_global_dram", "tactic_dram",
              "tactic_shared_memory")


def build_engine(onnx_path: Path, plan: Mapping, options: BuildOptions) -> BuildResult:
    trt = import_tensorrt()
    from polygraphy.backend.trt import EngineBytesFromNetwork, EngineFromBytes
    from polygraphy.exception import PolygraphyException
    from polygraphy.logger import G_LOGGER

    major = int(trt.__version__.split(".")[0])
    legacy = options.precision_mode == "constraints"
    if legacy and major >= 11:
        raise UserError(constraints_unavailable(trt.__version__), "set build.precision_mode=strongly_typed")
    notes: list[str] = []
    captured = io.StringIO()
    try:
        with G_LOGGER.verbosity(G_LOGGER.VERBOSE), contextlib.redirect_stdout(captured), \
                contextlib.redirect_stderr(captured):
            network, config = _loaders(trt, onnx_path, plan, options, legacy, notes)
            timing_cache = str(options.timing_cache) if options.timing_cache else None
            engine_bytes = EngineBytesFromNetwork(network, config=config, save_timing_cache=timing_cache)()
            engine = EngineFromBytes(engine_bytes)()
            inspector = engine.create_engine_inspector()
            information = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    except PolygraphyException as error:
        raise StageFailed(f"TensorRT could not build the engine: {error}. Build log:\n{_tail(captured.getvalue())}") \
            from error
    log = captured.getvalue() + ("\n".join(notes) + "\n" if notes else "")
    return BuildResult(engine_bytes=bytes(engine_bytes), inspector_json=str(information), log=log,
                       tensorrt_version=trt.__version__)


def _loaders(trt, onnx_path: Path, plan: Mapping, options: BuildOptions, legacy: bool, notes: list[str]):
    """The lazy network loader and the builder config (nothing runs until the engine loader calls them)."""
    from polygraphy.backend.trt import CreateConfig, LoadPlugins, NetworkFromOnnxPath, PostprocessNetwork, Profile

    strongly_typed = not legacy and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    network = NetworkFromOnnxPath(str(onnx_path), strongly_typed=strongly_typed)
    if options.plugins:
        network = LoadPlugins(plugins=list(options.plugins), obj=network)
    if legacy:
        network = PostprocessNetwork(network, functools.partial(_apply_plan, plan=plan, trt=trt, notes=notes),
                                     name="ApplyPlanPrecisions")
    uses_bf16 = any(n.get("precision") == "bf16" for n in plan.get("nodes", []))
    config = CreateConfig(
        tf32=options.tf32,
        fp16=legacy or None,
        bf16=(legacy and uses_bf16) or None,
        precision_constraints="obey" if legacy else None,
        profiles=[_profile(Profile, p) for p in options.profiles] or None,
        builder_optimization_level=options.builder_optimization_level,
        memory_pool_limits={_pool(trt, name): size for name, size in options.memory_pool_limits.items()} or None,
        load_timing_cache=str(options.timing_cache) if options.timing_cache else None,
        profiling_verbosity=trt.ProfilingVerbosity.DETAILED,
    )
    return network, config


def constraints_unavailable(version: str) -> str:
    return (f"build.precision_mode=constraints needs TensorRT 10.x, but TensorRT {version} is installed: "
            "TensorRT 11 removed weak typing (BuilderFlag.FP16, OBEY_PRECISION_CONSTRAINTS, layer precisions); "
            "every network is strongly typed and the mixed-precision ONNX from the precision stage already "
            "carries the plan")


def _apply_plan(network, plan: Mapping, trt, notes: list[str]):
    """PostprocessNetwork step: the plan's precision on every layer of each node, OBEY'd by the config."""
    dtypes = {trt.float32: "fp32", trt.float16: "fp16", getattr(trt, "bfloat16", None): "bf16"}
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    views = [LayerView(name=layer.name, metadata=getattr(layer, "metadata", None), layer_type=layer.type.name,
                       output_dtypes=tuple(dtypes.get(layer.get_output(i).dtype) for i in range(layer.num_outputs)))
             for layer in layers]
    tensors = {layer.get_output(i).name for layer in layers for i in range(layer.num_outputs)}
    constraints, unmapped = legacy_constraints(views, plan, tensors)
    types = {"fp32": trt.float32, "fp16": trt.float16, "bf16": getattr(trt, "bfloat16", None)}
    for layer in layers:
        constraint = constraints.get(layer.name)
        if constraint is None:
            continue
        layer.precision = types[constraint.precision]
        for index in constraint.float_outputs:
            layer.set_output_type(index, types[constraint.precision])
    notes.append(constraints_summary(constraints, unmapped))
    return network


def _profile(profile_class, profile: Mapping[str, Mapping]):
    built = profile_class()
    for name, spec in profile.items():
        built.add(name, min=tuple(spec["min"]), opt=tuple(spec["opt"]), max=tuple(spec["max"]))
    return built


def _pool(trt, name: str):
    if name not in POOL_TYPES:
        raise UserError(f"build.memory_pool_limits names the pool {name!r}", f"use one of {', '.join(POOL_TYPES)}")
    return getattr(trt.MemoryPoolType, name.upper())


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])
