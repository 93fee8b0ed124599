"""The one narrow interface between trtpipe and TensorRT.

Decision: everything trtpipe asks of TensorRT goes through `TensorRTBackend`
(four methods). The real implementation (`trtpipe.trt.polygraphy_backend.PolygraphyBackend`)
imports `tensorrt` lazily, through Polygraphy's loaders; stage tests hand the build
stage a test double at exactly this seam (`tests/trt/fake_tensorrt.py`) instead of
patching `tensorrt`. This module imports nothing heavy, so it is safe everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

PRECISION_MODES = ("strongly_typed", "constraints")


@dataclass(frozen=True)
class Availability:
    """Whether an engine can be built here; when not, what is missing and how to fix it."""

    available: bool
    problem: str = ""
    fix: str = ""

    def message(self) -> str:
        return f"{self.problem}. Fix: {self.fix}" if self.fix else self.problem


@dataclass(frozen=True)
class Environment:
    """The facts an engine (and a timing cache) is only valid for. None: not known here."""

    gpu_name: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    tensorrt: str | None = None

    def key_facts(self) -> dict[str, str | None]:
        return asdict(self)

    @property
    def tensorrt_major(self) -> int | None:
        if not self.tensorrt:
            return None
        head = self.tensorrt.split(".", 1)[0]
        return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class BuildOptions:
    """What the build stage asks for, already validated (see trtpipe.config.build_schema)."""

    precision_mode: str = "strongly_typed"
    # One dict per optimization profile: input name -> {"min": [...], "opt": [...], "max": [...]}.
    profiles: tuple[Mapping[str, Mapping[str, Sequence[int]]], ...] = ()
    builder_optimization_level: int | None = None
    # TensorRT memory pool name (lower case, e.g. "workspace") -> limit in bytes.
    memory_pool_limits: Mapping[str, int] = field(default_factory=dict)
    tf32: bool = False
    plugins: tuple[str, ...] = ()
    # File the build reads the timing cache from and merges its new timings into.
    timing_cache: Path | None = None


@dataclass(frozen=True)
class BuildResult:
    engine_bytes: bytes
    # IEngineInspector.get_engine_information(LayerInformationFormat.JSON), verbosity DETAILED.
    inspector_json: str
    log: str
    tensorrt_version: str


class TensorRTBackend(Protocol):
    """Everything trtpipe needs from TensorRT."""

    def availability(self) -> Availability:
        """Is `tensorrt` importable and a CUDA device visible? Never raises."""

    def environment(self) -> Environment:
        """GPU, driver, CUDA and TensorRT facts; what cannot be known here is None. Never raises."""

    def build(self, onnx_path: Path, plan: Mapping[str, Any], options: BuildOptions) -> BuildResult:
        """Build a serialized engine from the (mixed-precision) ONNX and the precision plan."""

    def parsed_layers(self, onnx_path: Path) -> list[tuple[str, str | None]]:
        """(layer name, metadata) of the network TensorRT's ONNX parser makes (no build)."""

    def run(self, engine_path: Path, feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Run the engine once per feed dict; each result maps output name -> numpy array."""
