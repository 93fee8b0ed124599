"""The trtexec command lines equivalent to a trtpipe build, for TensorRT 10.x and 11.x.

Flag names are those of trtexec's help text (TensorRT samples/common/sampleOptions.cpp,
BuildOptions/SystemOptions/ReportingOptions::help): --onnx, --saveEngine,
--minShapes/--optShapes/--maxShapes (one set per `--profile=N`), --memPoolSize=pool:size
(pools workspace|dlaSRAM|dlaLocalDRAM|dlaGlobalDRAM|tacticSharedMem, base-2 suffixes,
MiB by default), --noTF32, --stronglyTyped, --precisionConstraints=obey,
--layerPrecisions/--layerOutputTypes=name:type[,...], --builderOptimizationLevel,
--timingCacheFile, --profilingVerbosity=detailed, --exportLayerInfo, --staticPlugins,
--skipInference. Every flag is checked against the help text of TensorRT 10.0, 10.16,
11.0 and 11.1 (tests/trt/data/trtexec_flags.json, tests/trt/test_trtexec_flags.py).

Decision: pool sizes are written in MiB without a suffix (`workspace:1024`,
`tacticSharedMem:0.046875`), the one form every release reads alike: trtexec 10.0 reads
`pool:sizeInMiB` with `stringToValue<double>`, which is `std::stod(option) *
getUnitMultiplier(option)`, and then treats the result as MiB, so `1G` would be 2^30 MiB
(1 PiB) there; 10.1+ appends a default `M` and divides by 1 MiB, so `1G` is 1 GiB. Both
accept decimals, rounded down to whole bytes.

Decision: the `tactic_dram` pool (MemoryPoolType.TACTIC_DRAM) has no trtexec flag; a limit on
it is named in a comment of the file (build.memory_pool_limits.tactic_dram) instead of being
dropped silently.

TensorRT 11.x (migration guide "Migrating trtexec Usage from TensorRT 10.x to 11.x"):
--fp16/--bf16/--int8/--best are removed, --stronglyTyped is no longer needed (always on),
and with the OBEY/PREFER precision-constraint builder flags removed, so are
--precisionConstraints/--layerPrecisions/--layerOutputTypes (their help lines are gone
from 11.0's sampleOptions.cpp); --noTF32 remains (in 11.0 and 11.1's help text).

Paths are relative to the directory the file is in (the run directory's `build/`): the
model as the run directory publishes it (`../precision/model.onnx`), the outputs next to
the file, the timing cache under `timing_cache/`. The file is an artifact and must not
depend on where the cache lives.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from trtpipe.trt.seam import BuildOptions

# trtpipe's pool names (TensorRT's MemoryPoolType, lower case) -> trtexec's. TACTIC_DRAM has no flag
# (`pool ::=` of every recorded --memPoolSize help line): see unexpressible_pools.
TRTEXEC_POOLS = {
    "workspace": "workspace",
    "dla_managed_sram": "dlaSRAM",
    "dla_local_dram": "dlaLocalDRAM",
    "dla_global_dram": "dlaGlobalDRAM",
    "tactic_shared_memory": "tacticSharedMem",
}
PLAN_PRECISION_TYPES = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
MAJORS = (10, 11)


def trtexec_args(major: int, options: BuildOptions, plan: Mapping, *, model: str = "model.onnx",
                 engine: str = "model.engine", layer_info: str = "layer_info.json",
                 timing_cache: str | None = None, float_outputs: Mapping[str, int] | None = None) -> list[str]:
    args = ["trtexec", f"--onnx={model}", f"--saveEngine={engine}"]
    legacy = options.precision_mode == "constraints" and major < 11
    if legacy:
        args += _legacy_precision_args(plan, float_outputs or {})
    elif major < 11:
        args.append("--stronglyTyped")
    for index, profile in enumerate(options.profiles):
        if len(options.profiles) > 1:
            args.append(f"--profile={index}")
        for key in ("min", "opt", "max"):
            args.append(f"--{key}Shapes=" + ",".join(f"{_quoted(name)}:{'x'.join(map(str, spec[key]))}"
                                                    for name, spec in profile.items()))
    if not options.tf32:
        args.append("--noTF32")
    if options.builder_optimization_level is not None:
        args.append(f"--builderOptimizationLevel={options.builder_optimization_level}")
    pools = [f"{TRTEXEC_POOLS[name]}:{_size(size)}" for name, size in options.memory_pool_limits.items()
             if name in TRTEXEC_POOLS]
    if pools:
        args.append("--memPoolSize=" + ",".join(pools))
    if timing_cache:
        args.append(f"--timingCacheFile={timing_cache}")
    args += [f"--staticPlugins={plugin}" for plugin in options.plugins]
    args += ["--profilingVerbosity=detailed", f"--exportLayerInfo={layer_info}", "--skipInference"]
    return args


def trtexec_file(options: BuildOptions, plan: Mapping, *, in_use: str | None, model_sha256: str,
                 timing_cache: str | None = None, float_outputs: Mapping[str, int] | None = None,
                 model: str = "model.onnx") -> str:
    """The `trtexec` artifact: a commented shell snippet with one command per TensorRT major."""
    in_use_major = int(in_use.split(".")[0]) if in_use and in_use.split(".")[0].isdigit() else None
    lines = [
        "# Equivalent trtexec command lines for this trtpipe build stage.",
        f"# Run from the directory of this file; {model}: the ONNX the build consumed (sha256 {model_sha256}).",
        f"# TensorRT in use: {in_use or 'none (the build was deferred)'}",
    ]
    if options.timing_cache is not None or timing_cache:
        lines.append("# The timing cache file is kept by trtpipe under <cache.dir>/timing_cache/.")
    for pool, size in unexpressible_pools(options).items():
        lines.append(f"# Not expressible with trtexec (no --memPoolSize pool): build.memory_pool_limits.{pool}="
                     f"{size} bytes; trtpipe's build sets it, these commands leave that pool unlimited.")
    for major in MAJORS:
        marker = "  <- in use" if major == in_use_major else ""
        lines += ["", f"# TensorRT {major}.x{marker}"]
        if major >= 11:
            lines.append("# Strongly typed is the only mode: no --fp16, --stronglyTyped, --precisionConstraints, "
                         "--layerPrecisions.")
            if options.precision_mode == "constraints":
                lines.append("# build.precision_mode=constraints is not available on 11.x; "
                             "this builds the strongly typed engine.")
        elif options.precision_mode == "constraints":
            lines.append("# Legacy constraints mode: only layers named exactly like their ONNX node are listed; "
                         "trtexec cannot reach the extra <node>_<N> layers (trtpipe's build does).")
        args = trtexec_args(major, options, plan, model=model, timing_cache=timing_cache, float_outputs=float_outputs)
        lines.append(" \\\n    ".join(shlex.quote(arg) for arg in args))
    return "\n".join(lines) + "\n"


def unexpressible_pools(options: BuildOptions) -> dict[str, int]:
    """The memory pool limits trtexec has no --memPoolSize pool for (TACTIC_DRAM), in bytes."""
    return {name: size for name, size in options.memory_pool_limits.items() if name not in TRTEXEC_POOLS}


def _legacy_precision_args(plan: Mapping, float_outputs: Mapping[str, int]) -> list[str]:
    precisions, output_types, bf16 = [], [], False
    for node in plan.get("nodes", []):
        precision = PLAN_PRECISION_TYPES.get(node.get("precision"))
        name = node.get("name", "")
        if precision is None or any(c in name for c in ",:*"):
            continue  # kept as authored / no float output; or a name trtexec's spec grammar cannot hold
        bf16 = bf16 or precision == "bf16"
        precisions.append(f"{name}:{precision}")
        count = float_outputs.get(name, 1)
        if count:
            output_types.append(f"{name}:{'+'.join([precision] * count)}")
    args = ["--fp16"] + (["--bf16"] if bf16 else []) + ["--precisionConstraints=obey"]
    if precisions:
        args += ["--layerPrecisions=" + ",".join(precisions), "--layerOutputTypes=" + ",".join(output_types)]
    return args


def _quoted(name: str) -> str:
    """trtexec shape specs allow input names wrapped in single quotes (ex: 'Input:0')."""
    return f"'{name}'" if any(c in name for c in ",:") else name


def _size(size: int) -> str:
    """Bytes as MiB, the unit every trtexec 10.x/11.x reads without a suffix (exact: a power-of-two fraction)."""
    mib = size / 2**20
    return str(int(mib)) if mib == int(mib) else repr(mib)
