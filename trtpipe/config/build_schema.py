"""Schema of the `build.*` config node (the TensorRT build stage), and its checked form.

Decision: typed where Hydra can check it at compose time; `profiles` and
`memory_pool_limits` are typed Any so a whole profile can be given on the command
line (`build.profiles=[{x:{min:[1,8],opt:[4,8],max:[8,8]}}]`), like precision.rules.
Their fields are checked with the full key by `build_options` (and, for profiles,
against the ONNX graph by trtpipe.trt.profiles).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from trtpipe.errors import UserError

ON_MISSING = ("defer", "error")
# tensorrt: TensorRT 10.x/11.x through Polygraphy (a serialized engine). tensorrt_rtx: NVIDIA's
# TensorRT-RTX through its ONNX Runtime plugin EP (an EPContext ONNX model; trtpipe.trt.rtx).
BACKENDS = ("tensorrt", "tensorrt_rtx")
# What the EP's `nv_target_sm` accepts (kTargetSMValues in the 0.5.0 wheel's
# tensorrt_rtx_provider_options.h): Ampere RTX 30xx, Ada RTX 40xx, Blackwell RTX 50xx, GB10.
# sm90 (Hopper) and other data-centre parts are not RTX targets; the EP refuses them.
RTX_TARGET_SMS = ("sm86", "sm89", "sm120", "sm121")
AUDIT = ("warn", "error")
UNSUPPORTED = ("error", "warn")
MEMORY_POOLS = ("workspace", "dla_managed_sram", "dla_local_dram", "dla_global_dram", "tactic_dram",
                "tactic_shared_memory")


@dataclass
class RtxConfig:
    # The RTX architecture the EPContext engine is built for, ahead of time (nv_target_sm):
    # sm86 (RTX 30xx), sm89 (RTX 40xx, the default), sm120 (RTX 50xx), sm121 (GB10).
    target_sm: str = "sm89"


@dataclass
class BuildConfig:
    # tensorrt | tensorrt_rtx (an EPContext model built by the TensorRT-RTX EP for rtx.target_sm).
    backend: str = "tensorrt"
    rtx: RtxConfig = field(default_factory=RtxConfig)
    # Without TensorRT or a CUDA device: `defer` finishes as `deferred` with the trtexec
    # commands and a script to build on a GPU machine; `error` fails the run (exit 1).
    on_missing: str = "defer"
    # A node the plan keeps FP32 that the engine runs in low precision: warn | error (exit 1).
    audit: str = "warn"
    # strongly_typed: the mixed-precision ONNX decides every type (TensorRT 10.x and 11.x).
    # constraints: TensorRT 10.x only; FP16 flag plus the plan's precision on every layer
    # of each node, with OBEY_PRECISION_CONSTRAINTS.
    precision_mode: str = "strongly_typed"
    # One entry per optimization profile: {input name: {min: [..], opt: [..], max: [..]}}.
    # Dynamic inputs without them: the sample data's shapes (require_profiles). Validate feeds
    # profile 0's opt shapes where the data gives no shape.
    profiles: List[Any] = field(default_factory=list)
    # false: a dynamic model without profiles takes the sample data's shapes as its one profile
    # (min = opt = max; the build line says so). true (for CI): dynamic inputs need build.profiles.
    require_profiles: bool = False
    # 0..5; null: TensorRT's default (3).
    builder_optimization_level: Optional[int] = None
    # Pool (workspace, tactic_shared_memory, dla_*) -> limit: an integer in MiB, or a
    # string with a base-2 suffix ("512M", "4G").
    memory_pool_limits: Dict[str, Any] = field(default_factory=dict)
    # TF32 for FP32 MatMul/Conv: off by default, so FP32 nodes mean FP32 arithmetic.
    tf32: bool = False
    # Plugin libraries (.so) loaded before parsing; relative paths are relative to the
    # directory trtpipe was started in.
    plugins: List[str] = field(default_factory=list)
    # Share tactic timings across builds in <cache.dir>/timing_cache/, per GPU/driver/CUDA/TensorRT.
    timing_cache: bool = True
    # Ops TensorRT's ONNX parser cannot import (checked on the CPU before building or deferring):
    # error stops the run (exit 2) naming ops and nodes; warn reports them in build/parser_support.json.
    unsupported: str = "error"
    # The TensorRT version whose parser list the op check uses when TensorRT is not installed here
    # (installed TensorRT wins). A quoted string: build.tensorrt_version='10.16'. null: the newest list.
    tensorrt_version: Optional[str] = None


def checked_choice(config: Mapping, key: str, choices: tuple[str, ...]) -> str:
    value = config.get(key)
    if value not in choices:
        from trtpipe.config.override_text import choice_fix

        raise UserError(f"build.{key} is {value!r}", choice_fix(f"build.{key}", value, choices))
    return value


def checked_rtx_target(config: Mapping) -> str:
    """build.rtx.target_sm, one of RTX_TARGET_SMS, or a one-line UserError naming them."""
    value = (config.get("rtx") or {}).get("target_sm")
    if value not in RTX_TARGET_SMS:
        from trtpipe.config.override_text import choice_fix

        raise UserError(f"build.rtx.target_sm is {value!r}, not an RTX architecture TensorRT-RTX builds for",
                        choice_fix("build.rtx.target_sm", value, RTX_TARGET_SMS))
    return value


def memory_pool_bytes(limits: Mapping[str, Any]) -> dict[str, int]:
    """{pool: bytes}, from MiB integers or "512M"/"4G"/"64K"/"1024B" strings."""
    result = {}
    for pool, value in (limits or {}).items():
        if pool not in MEMORY_POOLS:
            raise UserError(f"build.memory_pool_limits names the pool {pool!r}", f"use one of: {', '.join(MEMORY_POOLS)}")
        result[pool] = _bytes(f"build.memory_pool_limits.{pool}", value)
    return result


def _bytes(where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value * 2**20
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", str(value), re.IGNORECASE)
    if isinstance(value, str) and match and float(match.group(1)) > 0:
        unit = {"": 2**20, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2).upper()]
        if str(value).strip().upper().endswith("B") and not match.group(2):
            unit = 1
        return int(float(match.group(1)) * unit)
    raise UserError(f"{where} is {value!r}", 'give MiB as an integer, or a size like "512M" or "4G"')


def check_plugins(plugins) -> list[str]:
    if not all(isinstance(p, str) and p for p in plugins or ()):
        raise UserError(f"build.plugins is {plugins!r}", "list plugin library paths as strings")
    return list(plugins or ())


def check_optimization_level(level) -> int | None:
    if level is not None and (not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 5):
        raise UserError(f"build.builder_optimization_level is {level!r}", "use an integer from 0 to 5, or null")
    return level
