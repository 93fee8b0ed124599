"""promote_outputs: mark chosen intermediate tensors as graph outputs so validation
compares them too (never drops an existing output)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import OWN_INPUTS, Stage, StageOutcome


class PromoteOutputs(Stage):
    name = "promote_outputs"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "2"
    consumes = ("model",)
    produces = ("model",)
    tools = ("onnx", "onnx-graphsurgeon", "numpy", "protobuf")

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.graph.promote import promote_outputs
        from trtpipe.cache.hashing import external_data_locations

        if not config["tensors"] and not config["nodes"]:
            # Decision: an empty selection passes the model through (a recipe may list the
            # stage and leave the choice to the command line).
            source = Path(inputs["model"])
            shutil.copyfile(source, out_dir / "model.onnx")
            for location in external_data_locations(source):  # the names the model records
                shutil.copyfile(source.parent / location, out_dir / location)
            return StageOutcome(outputs={"model": "model.onnx"}, summary="nothing to promote")
        report = promote_outputs(
            inputs["model"], out_dir / "model.onnx",
            tensors=list(config["tensors"]), nodes=list(config["nodes"]), match=config["match"],
            as_type=config["as_type"], warn_above=config["warn_above"], hard_links_ok=OWN_INPUTS,
        )
        return StageOutcome(
            outputs={"model": "model.onnx"},
            summary=f"{len(report['promoted'])} tensors promoted to outputs"
            + (f" ({len(report['already_outputs'])} already outputs)" if report["already_outputs"] else ""),
            details=report,
        )
