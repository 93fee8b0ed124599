"""upgrade_opset: convert to a target opset and fuse decomposed LayerNorm."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import OWN_INPUTS, Stage, StageOutcome


class UpgradeOpset(Stage):
    name = "upgrade_opset"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "6"
    consumes = ("model",)
    produces = ("model",)
    tools = ("onnx", "onnxruntime", "onnx-graphsurgeon", "numpy", "protobuf")
    # Untouched weights are hard-linked from the input's cache entry (immutable), never copied.
    uses_cache_dir = True

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.graph.upgrade import upgrade_model  # heavy (onnx): only when running

        report = upgrade_model(
            inputs["model"], out_dir / "model.onnx",
            target_opset=config["target"], fuse_layernorm=config["fuse_layernorm"],
            link_data_under=Path(config["cache_dir"]) / "entries" if config.get("cache_dir") else None,
            hard_links_ok=OWN_INPUTS,
        )
        layernorm = report.get("layernorm", {})
        fused, refused = len(layernorm.get("fused", [])), len(layernorm.get("refused", []))
        return StageOutcome(
            outputs={"model": "model.onnx"},
            summary=f"opset {report.get('opset_before')} -> {report.get('opset_after')}, "
            f"{fused} LayerNorm fused, {refused} refused"
            + (f" ({report['target_reason']})" if report.get("target_reason") else "")
            + (f"; target {config['target']} is below the model's opset {report['opset_before']}: left at "
               f"{report['opset_before']}, never downgraded" if report.get("target_below_model") else ""),
            details=report,
        )
