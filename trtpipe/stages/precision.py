"""precision: resolve rules against the network, add automatic rules (optionally an
accuracy-driven search), and write the strongly typed mixed-precision ONNX and
`precision_plan.json`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import Stage, StageOutcome

log = logging.getLogger(__name__)


class PlanPrecision(Stage):
    name = "precision"
    version = "4"  # 2: optional search; 3: search.json without wall-clock times; 4: max_rel floor
    consumes = ("model",)
    produces = ("model", "plan")
    tools = ("onnx", "onnxruntime", "numpy", "protobuf")
    uses_data = True

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.data import sample_feeds
        from trtpipe.graph.onnx_io import load_model, save_model
        from trtpipe.precision.decisions import MATERIALIZE_AS
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
        searching = config["search"]["enabled"] and config["default"] != "fp32"
        needs_feeds = searching or (config["default"] == "fp16" and config["auto"]["max_abs"] is not None)
        feeds = sample_feeds(model, config["data"]) if needs_feeds else None
        decisions, matches = plan_precision(net, config, feeds)
        search_note = ""
        if searching:
            decisions, search_note = _search(model, decisions, feeds, config, out_dir)
        node_precision = {name: MATERIALIZE_AS[d.precision] for name, d in decisions.items()}
        mixed, report = materialize(model, node_precision, keep_io_types=config["keep_io_types"])
        save_model(mixed, out_dir / "model.onnx")
        document = plan_document(net, decisions, matches, config["default"], report)
        (out_dir / "precision_plan.json").write_text(json.dumps(document, indent=2) + "\n")
        outputs = {"model": "model.onnx", "plan": "precision_plan.json"}
        if searching:
            outputs.update(search_rules="search_rules.yaml", search_log="search.json")
        return StageOutcome(
            outputs=outputs,
            summary=summary_line(document) + search_note,
            details={"materialize": {k: v for k, v in report.items() if k != "casts_added"}},
        )


def _search(model, decisions, feeds, config, out_dir: Path):
    """Replace the automatic plan by the smallest passing FP32 set the search finds."""
    from trtpipe.precision.search import search_fp32_set
    from trtpipe.validate.compare import Tolerances

    search = config["search"]
    tolerances = Tolerances.from_mapping(search["tolerance"], search.get("outputs") or {})
    result = search_fp32_set(model, decisions, feeds, tolerances, max_trials=search["max_trials"],
                             low_precision=config["default"], keep_io_types=config["keep_io_types"])
    for trial in result.trials:
        log.debug("search trial %d (%s): %d FP32, %s, %.3fs", trial.trial, trial.step, trial.fp32_count,
                  "passed" if trial.passed else "failed", trial.seconds)
    log.info("precision search: %d trials in %.2fs", len(result.trials), result.seconds)
    (out_dir / "search_rules.yaml").write_text(result.rules_yaml)
    (out_dir / "search.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    automatic = len(result.automatic_fp32_nodes) + len(result.fixed_fp32_nodes)
    verdict = "passing" if result.passed else "NO passing set found"
    note = (f"; search: {automatic} -> {result.fp32_count} FP32 nodes, {verdict}, "
            f"{len(result.trials)} trials (rules in precision/search_rules.yaml)")
    return result.decisions, note
