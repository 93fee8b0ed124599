"""build: the TensorRT engine of the mixed-precision ONNX, and an audit of the precision it runs.

Decisions:
- TensorRT is reached only through the seam (`trtpipe.trt.backend()`); tests pass a
  test double as `BuildEngine(backend=...)`. This module imports nothing heavy.
- Without TensorRT or a CUDA device the stage is `deferred`, not failed (unless
  `build.on_missing=error`): it writes the trtexec commands for TensorRT 10.x and 11.x
  and a script that builds the same engine later on a GPU machine. `produces` lists
  only what every outcome has (`trtexec`); a built engine adds engine, layer_info,
  audit and build_log.
- The cache key must change with the GPU, driver, CUDA and TensorRT: `key_facts()` is
  what the runner adds to this stage's key material.
- A failed audit (`build.audit=error`) is a verdict like validation's: the engine and
  the audit are cached and published, then the run exits 1.
- Before TensorRT is touched (or the build deferred), the model's op set is checked
  against the TensorRT ONNX parser's list (trtpipe.trt.parser.parser_check): an op it cannot
  import stops the run (exit 2) unless `build.unsupported=warn`; build/parser_support.json
  records the check either way.
- A model with dynamic inputs and no `build.profiles` takes the sample data's shapes as its
  profile (trtpipe.trt.data_profiles), unless `build.require_profiles=true`. The stage gets
  those shapes from the runner (`config["data_shapes"]`, from the top-level `data` block, never
  another stage's config); they are in the cache key only while no profile is given, so new
  sample data of the same shapes (or any data, with a profile) reuses the engine.
- `build.backend=tensorrt_rtx` (trtpipe.stages.build_rtx, trtpipe.trt.rtx): the same op check,
  profiles and trtexec.txt (the TensorRT 10/11 equivalent), then the EPContext model of the
  TensorRT-RTX EP for `build.rtx.target_sm` as the `engine` artifact, and a precision audit read
  from the real parser's log; deferred in the same way where the EP sees no device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from trtpipe.errors import StageFailed, UserError
from trtpipe.stages.base import Stage, StageOutcome

if TYPE_CHECKING:
    from trtpipe.trt.seam import TensorRTBackend

ENGINE, LAYER_INFO, AUDIT, TRTEXEC, LOG, TABLE = (
    "model.engine", "layer_info.json", "precision_audit.json", "trtexec.txt", "build.log", "audit.txt")


class BuildEngine(Stage):
    name = "build"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "10"
    consumes = ("model", "plan")
    # Always; engine, layer_info, audit, build_log when an engine was built.
    produces = ("trtexec", "parser_support")
    tools = ("onnx", "polygraphy")
    # The stage reads trtpipe's cache directory (for the timing cache) from config["cache_dir"],
    # which the runner supplies outside the key material.
    uses_cache_dir = True
    # The sample data's shapes make the profile of a dynamic model given none (key_config).
    uses_data_shapes = True
    # Its outputs name the model's own path (trtexec.txt, `key_input_places`); the parser reads
    # the model by path. A source read in place is checked at the start (trtpipe.source).
    snapshot_source = False

    def __init__(self, backend: TensorRTBackend | None = None) -> None:
        self._backend = backend

    @property
    def backend(self) -> TensorRTBackend:
        if self._backend is None:
            from trtpipe.trt import backend

            self._backend = backend()
        return self._backend

    @classmethod
    def key_facts(cls, backend: TensorRTBackend | None = None, config: Mapping | None = None) -> dict:
        """GPU name, compute capability, driver, CUDA and TensorRT versions (None where unknown);
        with build.backend=tensorrt_rtx, the EP's and TensorRT-RTX's versions and the target instead."""
        if (config or {}).get("backend") == "tensorrt_rtx":
            from trtpipe.trt.rtx.backend import key_facts

            return key_facts((config.get("rtx") or {}).get("target_sm"))
        if backend is None:
            from trtpipe.trt import backend as real_backend

            backend = real_backend()
        return backend.environment().key_facts()

    @classmethod
    def key_input_places(cls, inputs: Mapping[str, Path]) -> dict:
        """trtexec.txt names the model where the run directory publishes it (`../<stage>/...`)."""
        return {"model": published_model_path(Path(inputs["model"]), Path("build"))}

    @classmethod
    def key_config(cls, config: Mapping) -> dict:
        """The data's shapes count only while they can make the profile (no build.profiles given);
        `rtx` only with that backend, and the TensorRT-only settings only without it."""
        key = {name: value for name, value in config.items() if name != "data_shapes"}
        if config.get("backend") == "tensorrt_rtx":
            from trtpipe.trt.rtx.options import TENSORRT_ONLY

            key = {name: value for name, value in key.items() if name not in TENSORRT_ONLY}
        else:
            key.pop("rtx", None)
        if not config.get("profiles") and config.get("data_shapes"):
            key["data_shapes"] = config["data_shapes"]
        return key

    @classmethod
    def key_files(cls, config: Mapping) -> list[Path]:
        """The plugin libraries: an engine built with another build of a plugin is another engine."""
        return [Path(p).expanduser().absolute() for p in config.get("plugins") or () if isinstance(p, str) and p]

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        import onnx

        from trtpipe.cache.hashing import artifact_digest
        from trtpipe.trt.parser.parser_check import check_parser_support
        from trtpipe.trt.profiles import checked_profiles
        from trtpipe.trt.trtexec import trtexec_file

        options = _options(config)
        model = onnx.load(str(inputs["model"]), load_external_data=False)
        profiles = checked_profiles(model, config.get("profiles") or [], config.get("data_shapes"),
                                    bool(config.get("require_profiles", False)))
        derived = profiles and not config.get("profiles")
        options = _replace(options, profiles=tuple(profiles))
        plan = json.loads(Path(inputs["plan"]).read_text())
        if config.get("backend") == "tensorrt_rtx":
            from trtpipe.stages.build_rtx import run_rtx

            return run_rtx(inputs, config, out_dir, model, plan, options, derived and profiles)
        backend = self.backend
        environment = backend.environment()
        _, parser_fact = check_parser_support(model, config, environment.tensorrt, out_dir, plan)
        availability = backend.availability()
        facts = environment.key_facts()
        timing = None
        if config.get("timing_cache", True) and availability.available:
            from trtpipe.trt.timing_cache import cache_dir_from, timing_cache_file

            timing = timing_cache_file(cache_dir_from(config), facts)
            options = _replace(options, timing_cache=timing.path)
        model_sha = artifact_digest(Path(inputs["model"]))
        timing_name = (f"timing_cache/{timing.path.name}" if timing else "timing.cache") \
            if config.get("timing_cache", True) else None
        (out_dir / TRTEXEC).write_text(trtexec_file(
            options, plan, in_use=environment.tensorrt if availability.available else None,
            model_sha256=model_sha, timing_cache=timing_name, float_outputs=float_outputs(model),
            model=published_model_path(Path(inputs["model"]), out_dir)))
        if derived:
            from trtpipe.trt.data_profiles import derived_profile_fact

            parser_fact = f"{parser_fact}; {derived_profile_fact(profiles[0])}"
            # build_on_gpu.py gets no data: it builds with the profile written out.
            config = {**config, "profiles": profiles}
        if not availability.available:
            return with_parser_fact(deferred_outcome(availability, config, model_sha, artifact_digest(Path(inputs["plan"])),
                                          out_dir), parser_fact, derived and profiles)
        if options.precision_mode == "constraints" and (environment.tensorrt_major or 0) >= 11:
            from trtpipe.trt.builder import constraints_unavailable

            raise UserError(constraints_unavailable(environment.tensorrt), "set build.precision_mode=strongly_typed")
        result = backend.build(Path(inputs["model"]), plan, options)
        return with_parser_fact(_built(result, plan, model, config, facts, out_dir), parser_fact, derived and profiles)


def published_model_path(model: Path, out_dir: Path) -> str:
    """The model as seen from build/ of the run directory, for trtexec.txt.

    Decision: the runner hands the stage its cache entry's file (`<cache>/entries/<stage>/<key>/<file>`)
    and publishes it in the run directory as `<stage>/<file>`, so from `build/` it is
    `../<stage>/<file>`. Elsewhere (build_on_gpu.py with --model) the path relative to the output
    directory, also for a path that merely passes through a folder named `entries` outside a cache
    (no TRTPIPE_CACHE.json at its root). The producing stage is not in this stage's cache key; the
    same bytes from another stage are published under that stage's name: `key_input_places` puts
    this path in the key."""
    import os

    from trtpipe.cache.cache_dir import CACHE_MARKER

    model = Path(model).absolute()
    parts = model.parts
    # Only a real cache entry: `entries` under a root that holds the cache marker (any folder may be
    # called `entries`: its `../<stage>/<file>` would name a file the run directory never publishes).
    if len(parts) >= 5 and parts[-4] == "entries" and (Path(*parts[:-4]) / CACHE_MARKER).is_file():
        return f"../{parts[-3]}/{parts[-1]}"
    return Path(os.path.relpath(Path(model).absolute(), Path(out_dir).absolute())).as_posix()


def with_parser_fact(outcome: StageOutcome, parser_fact: str, profiles_from_data=None) -> StageOutcome:
    from trtpipe.trt.parser.parser_check import REPORT

    outcome.outputs["parser_support"] = REPORT
    if profiles_from_data:  # the entry record keeps the profile the data made (the summary says it in words)
        outcome.details["profiles_from_data"] = profiles_from_data
    outcome.summary = f"{outcome.summary}; {parser_fact}"
    return outcome


def _options(config: Mapping):
    from trtpipe.config.build_schema import (AUDIT, ON_MISSING, check_optimization_level,
                                             check_plugins, checked_choice, memory_pool_bytes)
    from trtpipe.trt.seam import PRECISION_MODES, BuildOptions

    checked_choice(config, "on_missing", ON_MISSING)
    checked_choice(config, "audit", AUDIT)
    return BuildOptions(
        precision_mode=checked_choice(config, "precision_mode", PRECISION_MODES),
        builder_optimization_level=check_optimization_level(config.get("builder_optimization_level")),
        memory_pool_limits=memory_pool_bytes(config.get("memory_pool_limits") or {}),
        tf32=bool(config.get("tf32", False)),
        plugins=tuple(str(Path(p).expanduser().absolute()) for p in check_plugins(config.get("plugins"))),
    )


def _replace(options, **changes):
    from dataclasses import replace

    return replace(options, **changes)


def deferred_outcome(availability, config: Mapping, model_sha: str, plan_sha: str, out_dir: Path,
                     what: str = "engine", finish: str | None = None, details: Mapping | None = None) -> StageOutcome:
    """The deferred build of either backend: the GPU machine's script and one summary line whose
    `finish` says how to complete it (default: TensorRT's trtexec commands and the script)."""
    from trtpipe.trt.deferred import SCRIPT_NAME, build_script

    if config["on_missing"] == "error":
        raise StageFailed(f"build: no {what} can be built here: {availability.problem} "
                          f"(build.on_missing=error demands one). Fix: {availability.fix}")
    (out_dir / SCRIPT_NAME).write_text(build_script(model_sha, plan_sha, config))
    finish = finish or f"trtexec commands: build/{TRTEXEC}; on a GPU machine: python build/{SCRIPT_NAME}"
    return StageOutcome(
        outputs={"trtexec": TRTEXEC, "build_script": SCRIPT_NAME},
        status="deferred",
        summary=f"DEFERRED, no {what} built: {availability.problem}. {finish}",
        details={"problem": availability.problem, "fix": availability.fix, **(details or {})},
    )


def _built(result, plan: Mapping, model, config: Mapping, facts: Mapping, out_dir: Path) -> StageOutcome:
    from trtpipe.graph.names.parser_names import parser_names
    from trtpipe.trt.inspect.audit import audit_document, audit_engine, audit_table
    from trtpipe.trt.inspect.inspector_json import parse_engine_information

    (out_dir / ENGINE).write_bytes(result.engine_bytes)
    (out_dir / LAYER_INFO).write_text(result.inspector_json)
    (out_dir / LOG).write_text(result.log)
    engine = parse_engine_information(result.inspector_json)
    node_outputs = {name: [t for t in node.output if t] for name, node in parser_names(model.graph.node).items()}
    graph = model.graph
    tensors = {t for node in graph.node for t in (*node.input, *node.output) if t} | \
        {i.name for i in graph.initializer} | {i.name for i in graph.input}
    rows = audit_engine(plan, engine, node_outputs, tensors)
    document = audit_document(rows, engine)
    (out_dir / AUDIT).write_text(json.dumps(document, indent=2) + "\n")
    (out_dir / TABLE).write_text(audit_table(rows))
    violations = document["violations"]
    failed = None
    if violations and config["audit"] == "error":
        failed = (f"precision audit: {len(violations)} node(s) the plan keeps FP32 run in low precision in the "
                  f"engine ({', '.join(violations[:5])}"
                  f"{f' and {len(violations) - 5} more' if len(violations) > 5 else ''}); "
                  f"every one is in build/{AUDIT}")
    gpu = facts.get("gpu_name") or "unknown GPU"
    return StageOutcome(
        outputs={"engine": ENGINE, "layer_info": LAYER_INFO, "audit": AUDIT, "trtexec": TRTEXEC, "build_log": LOG},
        summary=f"TensorRT {result.tensorrt_version} on {gpu}: {len(engine.layers)} engine layers; audit: "
                f"{len(rows)} FP32 nodes, {len(violations)} violation(s)",
        details={"environment": dict(facts), "inspector_schema": engine.schema, "audit": document["totals"]},
        console_file=TABLE,
        failed=failed,
    )


def float_outputs(model) -> dict[str, int]:
    """Node name (as the parser names layers) -> number of float outputs (unknown types count as float)."""
    from trtpipe.graph.names.parser_names import parser_names
    from trtpipe.precision.network.network import FLOAT_TYPES

    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.output, *graph.value_info]
             if v.type.HasField("tensor_type")}
    return {name: sum(1 for t in node.output if t and types.get(t, 1) in FLOAT_TYPES)
            for name, node in parser_names(graph.node).items()}
