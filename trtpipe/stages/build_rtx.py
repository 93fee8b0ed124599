"""The build stage with `build.backend=tensorrt_rtx`: an EPContext model from the TensorRT-RTX EP.

Part of the `build` stage (trtpipe.stages.build decides the backend and has done the op check's
inputs: model, plan, profiles); here only what differs. Decisions:
- The engine artifact is `model_ctx.onnx`: the EPContext ONNX model the EP compiled, the engine
  embedded (`embed_compiled_data_into_model`). ONNX Runtime runs it with the same EP on an RTX GPU
  of the target architecture (validate does, where a device is present).
- The op check uses the newest TensorRT parser list shipped (TensorRT-RTX's parser is of the
  same onnx-tensorrt lineage); `build.tensorrt_version` is TensorRT's, not read here.
- Where the EP is not installed, does not load or lists no device, the stage is `deferred` like
  the TensorRT build: one line saying why and how to finish on an RTX machine, and
  build/build_on_gpu.py, which runs this same code there.
- The audit reads the real parser's log (trtpipe.trt.rtx.audit); no layer_info (TensorRT-RTX
  fuses the whole graph into one Myelin node, the engine has nothing per node to inspect).
- A model the parser or the EP refuses fails the stage (exit 1) with the parser's own line.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from trtpipe.errors import StageFailed
from trtpipe.stages.base import StageOutcome

ENGINE = "model_ctx.onnx"
TRTEXEC, LOG, AUDIT, TABLE = "trtexec.txt", "build.log", "precision_audit.json", "audit.txt"


def run_rtx(inputs: Mapping[str, Path], config: Mapping, out_dir: Path, model, plan: Mapping, options,
            profiles_from_data) -> StageOutcome:
    from trtpipe.cache.hashing import artifact_digest
    from trtpipe.config.build_schema import checked_rtx_target
    from trtpipe.stages.build import float_outputs, with_parser_fact, published_model_path
    from trtpipe.trt.parser.parser_check import check_parser_support
    from trtpipe.trt.rtx import backend
    from trtpipe.trt.rtx.options import provider_options
    from trtpipe.trt.trtexec import trtexec_file

    target = checked_rtx_target(config)
    provider = provider_options(options)  # a setting TensorRT-RTX cannot honour: exit 2 before anything
    _, parser_fact = check_parser_support(model, {**config, "tensorrt_version": None}, None, out_dir, plan)
    model_sha = artifact_digest(Path(inputs["model"]))
    (out_dir / TRTEXEC).write_text(
        "# build.backend=tensorrt_rtx built with the TensorRT-RTX EP; these trtexec commands are the same build "
        "for TensorRT 10.x/11.x.\n"
        + trtexec_file(options, plan, in_use=None, model_sha256=model_sha, timing_cache=None,
                       float_outputs=float_outputs(model), model=published_model_path(Path(inputs["model"]), out_dir)))
    if profiles_from_data:
        from trtpipe.trt.data_profiles import derived_profile_fact

        parser_fact = f"{parser_fact}; {derived_profile_fact(options.profiles[0])}"
        config = {**config, "profiles": list(options.profiles)}
    availability = backend.availability()
    if not availability.available:
        outcome = _deferred(availability, config, model_sha, artifact_digest(Path(inputs["plan"])), out_dir)
        return with_parser_fact(outcome, parser_fact, profiles_from_data)
    result = backend.build(Path(inputs["model"]), out_dir / ENGINE, target, provider)
    (out_dir / LOG).write_text(result.log)
    if not result.ok:
        from trtpipe.trt.rtx.parser_log import BUILDER_FAILED, builder_reason, read, reason

        # The engine build failed after the parse: the builder's line says why, not a parser error
        # of the EP's earlier parse of an If/Loop body alone (trtpipe/trt/rtx/parser_log.py).
        if not result.problem and BUILDER_FAILED in (result.error or ""):
            why = f"parsed, refused by the builder: {builder_reason(read(result.log), result.error)}"
        else:
            why = result.problem or reason(read(result.log), result.error)
        raise StageFailed(f"build: TensorRT-RTX did not build the model for {target}: {why}")
    return with_parser_fact(_built(result, plan, model, config, target, out_dir), parser_fact, profiles_from_data)


def _deferred(availability, config: Mapping, model_sha: str, plan_sha: str, out_dir: Path) -> StageOutcome:
    from trtpipe.stages.build import deferred_outcome
    from trtpipe.trt.deferred import SCRIPT_NAME

    return deferred_outcome(availability, config, model_sha, plan_sha, out_dir, what="TensorRT-RTX engine",
                            finish=f"To finish {availability.fix}, then python build/{SCRIPT_NAME}",
                            details={"backend": "tensorrt_rtx"})


def _built(result, plan: Mapping, model, config: Mapping, target: str, out_dir: Path) -> StageOutcome:
    from trtpipe.trt.rtx import backend
    from trtpipe.trt.rtx.audit import audit_table, parser_audit
    from trtpipe.trt.rtx.parser_log import read

    log = read(result.log)
    facts = backend.key_facts(target)
    document = parser_audit(plan, model, log, facts)
    (out_dir / AUDIT).write_text(json.dumps(document, indent=2) + "\n")
    (out_dir / TABLE).write_text(audit_table(document))
    return _verdict(document, log, config, target, facts)


def _verdict(document: Mapping, log, config: Mapping, target: str, facts: Mapping) -> StageOutcome:
    """The stage's outcome from the audit (trtpipe.trt.rtx.audit). Decisions:
    - A log without per-node lines fails the stage whatever `build.audit` says: nothing was
      audited, and "0 violations" would be a pass nobody checked (issue 32, item 16).
    - `build.audit=error` fails on `violation` (planned FP32 typed lower), `mismatch` and `absent`
      (a node whose precision nothing shows); `widened` (planned FP16 parsed FLOAT: slower, as
      accurate) is reported in the summary, never a failure: the engine keeps the plan's accuracy.
    """
    from trtpipe.trt.rtx.audit import FINDINGS, MEANING

    findings = document["findings"]
    failed = None
    if document.get("error"):
        failed = f"precision audit: {document['error']}"
    elif config["audit"] == "error":
        failing = [(kind, findings[kind]) for kind in ("violation", "mismatch", "absent") if findings[kind]]
        if failing:
            failed = ("precision audit: " + "; ".join(
                f"{len(nodes)} {kind} node(s), {MEANING[kind]} ({', '.join(nodes[:5])}"
                f"{f' and {len(nodes) - 5} more' if len(nodes) > 5 else ''})" for kind, nodes in failing)
                + f"; every one is in build/{AUDIT}")
    totals = document["totals"]
    found = ", ".join(f"{len(findings[kind])} {kind}" for kind in FINDINGS if findings[kind])
    engine = f"engine generated in {log.engine_seconds:.2f}s" if log.engine_seconds is not None else "engine built"
    return StageOutcome(
        outputs={"engine": ENGINE, "audit": AUDIT, "trtexec": TRTEXEC, "build_log": LOG},
        summary=f"TensorRT-RTX {facts['tensorrt_rtx']} (EP {facts['ep']}) for {target}: EPContext model, {engine}; "
                f"audit: {totals['audited']} plan nodes ({totals['in_bodies']} in bodies), "
                f"{totals.get('ok', 0)} as planned" + (f", {found}" if found else ""),
        details={"environment": facts, "audit": document["totals"]},
        console_file=TABLE,
        failed=failed,
    )
