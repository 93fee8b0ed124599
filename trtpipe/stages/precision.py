"""precision: resolve rules against the network, add automatic rules, and write the
strongly typed mixed-precision ONNX and `precision_plan.json`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import Stage, StageOutcome

log = logging.getLogger(__name__)

# How the plan's precisions are handed to the materialiser.
_MATERIALIZE_AS = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "keep": "keep", "none": "keep"}


class PlanPrecision(Stage):
    name = "precision"
    version = "1"
    consumes = ("model",)
    produces = ("model", "plan")
    tools = ("onnx", "onnxruntime", "numpy", "protobuf")
    uses_data = True

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.data import sample_feeds
        from trtpipe.graph.onnx_io import load_model, save_model
        from trtpipe.precision.materialize import materialize
        from trtpipe.precision.names_table import write_names_table
        from trtpipe.precision.network import name_nodes_as_parser_does, network_from_model
        from trtpipe.precision.plan_document import plan_document, summary_line
        from trtpipe.precision.planner import plan_precision

        model = load_model(inputs["model"])
        name_nodes_as_parser_does(model)
        net = network_from_model(model)
        if config["list_only"]:
            count = write_names_table(net, out_dir / "network_names.txt")
            return StageOutcome(outputs={"names": "network_names.txt"}, summary=f"listed {count} nodes",
                                console_file="network_names.txt", stop=True)
        needs_feeds = config["default"] == "fp16" and config["auto"]["max_abs"] is not None
        feeds = sample_feeds(model, config["data"]) if needs_feeds else None
        decisions, matches = plan_precision(net, config, feeds)
        node_precision = {name: _MATERIALIZE_AS[d.precision] for name, d in decisions.items()}
        mixed, report = materialize(model, node_precision, keep_io_types=config["keep_io_types"])
        save_model(mixed, out_dir / "model.onnx")
        document = plan_document(net, decisions, matches, config["default"], report)
        (out_dir / "precision_plan.json").write_text(json.dumps(document, indent=2) + "\n")
        return StageOutcome(
            outputs={"model": "model.onnx", "plan": "precision_plan.json"},
            summary=summary_line(document),
            details={"materialize": {k: v for k, v in report.items() if k != "casts_added"}},
        )
