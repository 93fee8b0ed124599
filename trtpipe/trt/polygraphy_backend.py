"""`PolygraphyBackend`: the real `TensorRTBackend` (TensorRT through Polygraphy's loaders)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trtpipe.trt.seam import Availability, BuildOptions, BuildResult, Environment


class PolygraphyBackend:
    """Each method imports what it needs when called; constructing it imports nothing heavy."""

    def availability(self) -> Availability:
        from trtpipe.trt.availability import check_availability

        return check_availability()

    def environment(self) -> Environment:
        from trtpipe.trt.environment import detect_environment

        return detect_environment()

    def build(self, onnx_path: Path, plan: Mapping[str, Any], options: BuildOptions) -> BuildResult:
        from trtpipe.trt.builder import build_engine

        return build_engine(Path(onnx_path), plan, options)

    def parsed_layers(self, onnx_path: Path) -> list[tuple[str, str | None]]:
        from trtpipe.trt.parser.parse import parsed_layers

        return parsed_layers(Path(onnx_path))

    def run(self, engine_path: Path, feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        from trtpipe.trt.runner import EngineRunner

        return EngineRunner(Path(engine_path)).run_all(feeds)
