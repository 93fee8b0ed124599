"""The build settings as TensorRT-RTX EP provider options, and the settings it has no option for.

Decisions (the option names are the wheel's tensorrt_rtx_provider_options.h):
- One optimization profile: `nv_profile_{min,opt,max}_shapes`, `name:AxB,name2:CxD` (the
  format of ONNX Runtime's TensorRT EPs, and what ONNX Runtime GenAI hands this EP:
  `input_ids:1x1,image_features:0x4096`). Several profiles would need `nv_multi_profile_enable`
  and a format the header does not spell out: refused rather than guessed.
- `memory_pool_limits.workspace` -> `nv_max_workspace_size` (bytes); other pools have no option.
- TensorRT-RTX is strongly typed only: `precision_mode=constraints` is refused; so are
  settings that would be silently ignored (tf32, plugins, builder_optimization_level, other
  memory pools): silence about a setting is the bug trtpipe exists to fix. `timing_cache` and
  `tensorrt_version` concern the TensorRT backend only and are left out of the key.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtpipe.errors import UserError

TENSORRT_ONLY = ("timing_cache", "tensorrt_version")
_RTX = "build.backend=tensorrt_rtx"


def provider_options(options) -> dict[str, str]:
    """`options`: trtpipe.trt.seam.BuildOptions, already checked. UserError for what RTX cannot honour."""
    if options.precision_mode != "strongly_typed":
        raise UserError(f"{_RTX} is strongly typed only; build.precision_mode={options.precision_mode} is TensorRT 10.x's",
                        "set build.precision_mode=strongly_typed")
    refused = [(key, value) for key, value in (("tf32", options.tf32), ("plugins", list(options.plugins)),
                                               ("builder_optimization_level", options.builder_optimization_level))
               if value not in (False, [], None)]
    pools = sorted(set(options.memory_pool_limits) - {"workspace"})
    if pools:
        refused.append(("memory_pool_limits", pools))
    if refused:
        key, value = refused[0]
        raise UserError(f"build.{key}={value} has no TensorRT-RTX EP option ({_RTX})",
                        f"remove build.{key} (its default) or use build.backend=tensorrt")
    result = {}
    if "workspace" in options.memory_pool_limits:
        result["nv_max_workspace_size"] = str(options.memory_pool_limits["workspace"])
    if len(options.profiles) > 1:
        raise UserError(f"{_RTX} builds one optimization profile, build.profiles has {len(options.profiles)}",
                        "keep one profile in build.profiles")
    if options.profiles:
        result.update(profile_options(options.profiles[0]))
    return result


def profile_options(profile: Mapping[str, Mapping[str, Sequence[int]]]) -> dict[str, str]:
    def shapes(which: str) -> str:
        return ",".join(f"{name}:{'x'.join(str(int(d)) for d in dims[which])}" for name, dims in profile.items())

    return {"nv_profile_min_shapes": shapes("min"), "nv_profile_opt_shapes": shapes("opt"),
            "nv_profile_max_shapes": shapes("max")}
