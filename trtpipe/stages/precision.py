"""precision: resolve rules against the network, add automatic rules (optionally an
accuracy-driven search), and write the strongly typed mixed-precision ONNX and
`precision_plan.json`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping

from trtpipe.config.schema import repair_settings
from trtpipe.stages.base import OWN_INPUTS, Stage, StageOutcome

log = logging.getLogger(__name__)


class PlanPrecision(Stage):
    name = "precision"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "32"
    consumes = ("model",)
    produces = ("model", "plan")
    # tensorrt: where it is importable, rules are also checked against the parsed network.
    tools = ("onnx", "onnxruntime", "numpy", "protobuf", "tensorrt")
    uses_data = True

    def __init__(self, backend=None) -> None:
        # The TensorRT seam (trtpipe.trt.backend()); tests pass a double here.
        self._backend = backend

    @classmethod
    def key_config(cls, config: Mapping) -> dict:
        """Decision: with the search off (or `default: fp32`, which never searches) the search's
        settings (max_trials) change nothing: only `search.enabled` stays in the key, and its
        bounds (tolerance and outputs, interpolated from validate.*) only where the repair
        judges by them. The repair's settings are keyed as `repair_settings` spells them
        (`repair: false` and `repair: {enabled: false}` are one key), and not at all where it
        does not apply. Without a model run (no search, no repair, no range rule) the sample
        count `data.iterations` changes nothing either (the FLOP shapes come from one sample)."""
        key = dict(config)
        repairing = cls._repairing(config)
        key["repair"] = repair_settings(_plain(config.get("repair", True))) if repairing else {"enabled": False}
        if not cls._searching(config):
            key["search"] = {"enabled": config["search"]["enabled"]}
            if repairing:
                key["search"].update(tolerance=config["search"]["tolerance"], outputs=config["search"]["outputs"],
                                     float_model=config["search"].get("float_model"))
        if not cls._needs_feeds(config) and isinstance(config.get("data"), Mapping):
            key["data"] = {k: v for k, v in config["data"].items() if k != "iterations"}
        return key

    @classmethod
    def key_files(cls, config: Mapping) -> list[Path]:
        """The float model the trials are anchored on (precision.search.float_model, validate's), where the
        repair or the search judges: its content changes their verdicts, not its path."""
        from trtpipe.validate.float_model import float_model_path

        judging = cls._searching(config) or cls._repairing(config)
        path = float_model_path(config["search"].get("float_model")) if judging else None
        return [path] if path is not None else []

    @staticmethod
    def _searching(config: Mapping) -> bool:
        return bool(config["search"]["enabled"]) and config["default"] != "fp32" and not config["list_only"]

    @classmethod
    def _repairing(cls, config: Mapping) -> bool:
        """The repair applies to a reduced plan the search did not make (a search result passes, or no
        plan did)."""
        if config["default"] == "fp32" or config["list_only"] or cls._searching(config):
            return False
        return repair_settings(_plain(config.get("repair", True)))["enabled"]

    @classmethod
    def _needs_feeds(cls, config: Mapping) -> bool:
        if config["list_only"]:
            return False
        return (cls._searching(config) or cls._repairing(config)
                or (config["default"] == "fp16" and config["auto"]["max_abs"] is not None))

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.data import sample_feeds
        from trtpipe.onnxmodel.onnx_io import load_model, save_model
        from trtpipe.precision.network.decisions import LOW_PRECISIONS, MATERIALIZE_AS
        from trtpipe.precision.auto.control_flow import derive_control_flow
        from trtpipe.precision.auto.qdq_plan import derive_quantizers
        from trtpipe.precision.network.flop_shapes import feeds_for_shapes, record_feed_shapes
        from trtpipe.precision.materialize.materialize_reuse import materialize_or_reuse
        from trtpipe.precision.network.names_table import write_names_table
        from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model
        from trtpipe.precision.plan.plan_document import plan_document, summary_line
        from trtpipe.precision.plan.baseline import is_baseline, refuse_unless_fp32
        from trtpipe.precision.plan.planner import plan_precision
        from trtpipe.precision.materialize.materialize import authored_element_types
        from trtpipe.precision.materialize.cast_steps import cast_steps
        from trtpipe.precision.materialize.redundant_casts import forget_removed_casts, record_removals, remove_redundant_casts

        model = load_model(inputs["model"], weights_on_disk=True, hard_links_ok=OWN_INPUTS)
        name_nodes_as_parser_does(model)
        net = network_from_model(model)
        if config["list_only"]:
            count = write_names_table(net, out_dir / "network_names.txt")
            return StageOutcome(outputs={"names": "network_names.txt"}, summary=f"listed {count} nodes",
                                console_file="network_names.txt", stop=True)
        searching = self._searching(config)
        needs_feeds = self._needs_feeds(config)
        feeds = sample_feeds(model, config["data"]) if needs_feeds else None
        notes: dict = {}
        decisions, matches = plan_precision(net, config, feeds, notes)
        if not net.run_shapes:  # no reference run recorded the real shapes: infer them from a sample's
            record_feed_shapes(net, feeds[0] if feeds else feeds_for_shapes(model, config))
        search_note, repair = "", None
        if searching:
            net.last_materialised = None  # the search materialises many plans: not two copies alive at once
            decisions, search_note = _search(model, decisions, feeds, config, out_dir)
            derive_quantizers(net, decisions, config["default"])  # a Q reads its input as produced (qdq_plan.py)
            derive_control_flow(net, decisions)  # the search moves body nodes: say what their If/Loop is now
        elif self._repairing(config):
            repair = _repair(model, net, decisions, feeds, config)
            if repair.repaired:
                net.last_materialised = None  # another plan than the stored-tensor check's
                decisions = repair.decisions
                derive_quantizers(net, decisions, config["default"])
                derive_control_flow(net, decisions)
        node_precision = {name: MATERIALIZE_AS[d.precision] for name, d in decisions.items()}
        # The stored-tensor check's materialisation when the plan did not change since (materialize_reuse.py).
        mixed, report = materialize_or_reuse(net, model, node_precision, config["keep_io_types"])
        removed = remove_redundant_casts(mixed)  # dead Casts and exact round trips (redundant_casts.py)
        forget_removed_casts(report, removed)
        report["casts"] = cast_steps(mixed)  # counted again without the removed ones
        if is_baseline(config["default"]):  # the FP32 baseline computes in FP32, or refuses (baseline.py)
            refuse_unless_fp32(mixed, authored_element_types(mixed), report["precision_not_applied"],
                               frozenset(n for n, d in decisions.items() if d.precision in LOW_PRECISIONS))
        save_model(mixed, out_dir / "model.onnx")
        document = plan_document(net, decisions, matches, config["default"], report)
        document.update(notes)  # boundaries: the stored-tensor check (auto_boundaries.py)
        if repair is not None and repair.ran:  # a plan that passed as decided is written as without the repair
            document["repair"] = repair.to_json()
        record_removals(document, removed)
        document["tensorrt_check"] = _rules_against_tensorrt(inputs["model"], net, matches, self._backend)
        (out_dir / "precision_plan.json").write_text(json.dumps(document, indent=2) + "\n")
        outputs = {"model": "model.onnx", "plan": "precision_plan.json"}
        if searching:
            outputs.update(search_rules="search_rules.yaml", search_log="search.json")
        return StageOutcome(
            outputs=outputs,
            summary=summary_line(document) + search_note + _repair_note(repair, config),
            details={"materialize": {k: v for k, v in report.items() if k != "casts_added"}},
        )


def _rules_against_tensorrt(model_path: Path, net, matches, backend) -> dict:
    """Where TensorRT is importable: rule-matched nodes that produce no layer in the parsed
    network (folded or absorbed by the parser), so the rule has no effect in the engine."""
    if not matches:
        return {"checked": False, "reason": "no precision rules"}
    from trtpipe.trt import backend as real_backend
    from trtpipe.trt.inspect.layer_names import layers_by_node

    backend = backend or real_backend()
    availability = backend.availability()
    if not availability.available:
        return {"checked": False, "reason": availability.message()}
    carried = layers_by_node(backend.parsed_layers(model_path), net.nodes)
    without = {m.rule.name: [n for n in m.nodes if n not in carried] for m in matches}
    without = {rule: nodes for rule, nodes in without.items() if nodes}
    for rule, nodes in without.items():
        log.warning("precision rule %s: %d matched node(s) produce no TensorRT layer (%s): TensorRT's parser "
                    "folds or absorbs them, so the rule does not act on them", rule, len(nodes), ", ".join(nodes[:3]))
    return {"checked": True, "rules_without_layers": without}


def _repair(model, net, decisions, feeds, config):
    """The automatic plan checked under the emulation, and repaired when it breaks a bound (repair.py)."""
    from trtpipe.search.repair import repair_plan
    from trtpipe.validate.compare import Tolerances
    from trtpipe.validate.float_model import float_model_path

    settings = repair_settings(_plain(config.get("repair", True)))
    search = config["search"]
    tolerances = Tolerances.from_mapping(search["tolerance"], search.get("outputs") or {})
    result = repair_plan(model, decisions, feeds, tolerances, max_trials=settings["max_trials"],
                         max_seconds=settings["max_seconds"], low_precision=config["default"],
                         keep_io_types=config["keep_io_types"], shapes_of=net,
                         float_model=float_model_path(search.get("float_model")))
    if result.ran:
        log.info("precision repair: %d trials in %.2fs, %s", len(result.trials), result.seconds,
                 "repaired" if result.repaired else "no passing plan")
    return result


def _repair_note(repair, config) -> str:
    if repair is None:
        return ""
    from trtpipe.search.repair import repair_note

    settings = repair_settings(_plain(config.get("repair", True)))
    return repair_note(repair, settings["max_trials"], settings["max_seconds"])


def _plain(value):
    """A config value as plain Python (the stage receives mappings; a bool stays a bool)."""
    return dict(value) if isinstance(value, Mapping) else value


def _search(model, decisions, feeds, config, out_dir: Path):
    """Replace the automatic plan by the passing plan with the most low-precision FLOPs the search finds."""
    from trtpipe.search.fp32_set import search_fp32_set
    from trtpipe.validate.compare import Tolerances
    from trtpipe.validate.float_model import float_model_path

    search = config["search"]
    tolerances = Tolerances.from_mapping(search["tolerance"], search.get("outputs") or {})
    result = search_fp32_set(model, decisions, feeds, tolerances, max_trials=search["max_trials"],
                             low_precision=config["default"], keep_io_types=config["keep_io_types"],
                             float_model=float_model_path(search.get("float_model")))
    for trial in result.trials:
        log.debug("search trial %d (%s): %d FP32, %s, %.3fs", trial.trial, trial.step, trial.fp32_count,
                  "passed" if trial.passed else "failed", trial.seconds)
    log.info("precision search: %d trials in %.2fs, %.1f%% FLOPs low precision; emulation: %s", len(result.trials),
             result.seconds, 100 * result.low_precision_flop_share, result.emulation)
    (out_dir / "search_rules.yaml").write_text(result.rules_yaml)
    (out_dir / "search.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    automatic = len(result.automatic_fp32_nodes) + len(result.fixed_fp32_nodes)
    verdict = "passing" if result.passed else "NO passing set found"
    share = f"{result.trials[0].low_precision_flop_share:.1%} -> {result.low_precision_flop_share:.1%} FLOPs low"
    note = (f"; search: {automatic} -> {result.fp32_count} FP32 nodes, {share}, {verdict}, "
            f"{len(result.trials)} trials (rules in precision/search_rules.yaml)")
    return result.decisions, note
