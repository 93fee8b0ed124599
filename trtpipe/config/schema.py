"""Dataclass schemas for every config node.

Decision: every node has a schema so that a typo in a key or a wrong type fails
at compose time with the full key path. YAML variants in `conf/<stage>/` extend
these schemas (their defaults list starts with `schema`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class ModelConfig:
    # An ONNX file; relative paths are relative to the directory trtpipe was started in.
    path: Optional[str] = None
    # Used when `path` is unset: one of trtpipe.models.BUILTIN_MODELS.
    builtin: str = "transformer"


@dataclass
class CacheConfig:
    # Decision: the environment variable wins over the default so that CI jobs and
    # clusters can point every run at one shared cache without editing configs.
    dir: str = "${oc.env:TRTPIPE_CACHE,outputs/cache}"
    # Seconds to wait for another process computing the same stage.
    lock_timeout: float = 7200.0


@dataclass
class SanitizeConfig:
    infer_shapes: bool = True
    fold_constants: bool = True
    cleanup: bool = True
    toposort: bool = True
    fix_reshape_allowzero: bool = True


@dataclass
class UpgradeOpsetConfig:
    # Opset 17 introduced LayerNormalization, which keeps the variance inside one op.
    target: int = 17
    fuse_layernorm: bool = True


@dataclass
class TrtpipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    stages: List[str] = field(default_factory=lambda: ["sanitize", "upgrade_opset"])
    cache: CacheConfig = field(default_factory=CacheConfig)
    sanitize: SanitizeConfig = field(default_factory=SanitizeConfig)
    upgrade_opset: UpgradeOpsetConfig = field(default_factory=UpgradeOpsetConfig)
    # Print full tracebacks for errors (also enabled by TRTPIPE_DEBUG=1).
    debug: bool = False
