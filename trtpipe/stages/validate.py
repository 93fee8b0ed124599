"""validate: run the FP32 reference and each candidate on the same inputs, judge them,
and when a candidate fails, name the first ONNX node whose output went wrong.

Decision (after Polygraphy): runners produce results and a separate comparator
judges them — `trtpipe.numerics.reference`/`emulator` run, `compare` judges,
`localize` explains; this file only wires them and writes `validation.json`.
A failed verdict is a result like any other: it is cached and published, and the
stage is then marked failed so the run exits 1.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import OWN_INPUTS, Stage, StageOutcome


class ValidateAccuracy(Stage):
    name = "validate"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "17"
    consumes = ("model", "reference")
    produces = ("report",)
    # The engine, when a build stage produced one, is validated as the `tensorrt` candidate (its verdict
    # is named `tensorrt_rtx` when the engine is a TensorRT-RTX EPContext model, trtpipe.trt.rtx.runner).
    optional_consumes = ("engine",)
    tools = ("onnx", "onnxruntime", "numpy", "protobuf")
    uses_data = True

    # No key facts of its own: whether an engine exists (and which) is its `engine` input, whose
    # build key already holds the GPU facts, or for TensorRT-RTX whether the EP saw a device; a
    # probe of the EP here (0.3-0.55 s a run) would repeat what the inputs already say.

    @classmethod
    def key_files(cls, config: Mapping) -> list[Path]:
        """The float model (validate.float_model): its content changes the report, not its path."""
        from trtpipe.validate.float_model import float_model_path

        path = float_model_path(config.get("float_model"))
        return [path] if path is not None else []

    def __init__(self, backend=None) -> None:
        # The TensorRT seam (trtpipe.trt.backend()); tests pass a double here.
        self._backend = backend

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.config.output_names import check_output_names
        from trtpipe.data import sample_feeds
        from trtpipe.onnxmodel.onnx_io import load_model
        from trtpipe.graph.names.promoted_names import read_promoted_outputs
        from trtpipe.validate.degenerate_data import degenerate_data
        from trtpipe.validate.compare import Tolerances, reference_nonfinite_notes
        from trtpipe.validate.anchor_model import anchor_for
        from trtpipe.validate.anchored import AnchoredJudge, PlainJudge
        from trtpipe.validate.float_model import float_model_path
        from trtpipe.numerics.emulator import EmulatedRunner
        from trtpipe.validate.localize import localize_results
        from trtpipe.numerics.reference import ReferenceRunner
        from trtpipe.validate.code_agreement import code_agreement, code_tensors
        from trtpipe.validate.report_table import failure_message, report_table

        reference_model = load_model(inputs["reference"], weights_on_disk=True, hard_links_ok=OWN_INPUTS)
        candidate_model = load_model(inputs["model"], weights_on_disk=True, hard_links_ok=OWN_INPUTS)
        tolerances = Tolerances.from_mapping(config["tolerance"], config.get("outputs") or {})
        feeds = sample_feeds(reference_model, config["data"])
        outputs = [value.name for value in candidate_model.graph.output]
        check_output_names("validate.outputs", config.get("outputs"), outputs)  # a misspelled name: exit 2
        reference_outputs = {value.name for value in reference_model.graph.output}
        # Promoted intermediates are compared too: the reference exposes them when needed,
        # and a promoted `t__fp32` output is compared with the reference's tensor `t`.
        produced = {out for node in reference_model.graph.node for out in node.output}
        promoted = _reference_names(outputs, read_promoted_outputs(candidate_model), candidate_model,
                                    produced | reference_outputs)
        wanted = {promoted.get(name, name) for name in outputs} - reference_outputs
        # Decision: with the plot on, localisation runs in any case, so both models expose
        # their intermediates from the start and localisation reuses the first iteration
        # (one session and one emulation per model instead of two; exposing changes no
        # result, the sessions compute op by op). Otherwise only what is compared is exposed.
        expose = bool(config["plot"]) and bool(config.get("plot_passed"))
        # A quantized model's codes, compared between the reference and the emulation (code_agreement.py).
        codes = code_tensors(reference_model, candidate_model)
        reference = ReferenceRunner(reference_model, expose_intermediates=expose,
                                    extra_outputs=sorted((wanted & produced) | set(codes)))
        first_reference, reference_runs, reference_codes = None, [], []
        for index, feeds_i in enumerate(feeds):
            result = reference.run(feeds_i)
            first_reference = result if index == 0 and expose else first_reference
            reference_runs.append(_by_candidate_name(result, outputs, promoted))
            reference_codes.append({name: result[name] for name in codes if name in result})
        # Each session holds (a mapping of) every weight: one at a time on a large model.
        del reference
        # A quantized model's verdict is anchored on a float model (validate/anchored.py); any other
        # model's is judged against the reference alone, as it always was.
        anchor = anchor_for(reference_model, float_model_path(config.get("float_model")), feeds)
        judge = (AnchoredJudge(reference_runs, outputs, tolerances, config["min_compared"], anchor=anchor) if anchor
                 else PlainJudge(reference_runs, outputs, tolerances, config["min_compared"]))
        verdicts, notes, localization, precisions = [], [], None, {}
        candidate_runs, agreement = {}, None  # runs by verdict name, for the float model's comparisons
        for candidate in config["candidates"]:
            if candidate == "emulated":
                runner = EmulatedRunner(candidate_model, expose_intermediates=expose, extra_outputs=sorted(codes))
                runs = [runner.run(feeds_i) for feeds_i in feeds]
                agreement = code_agreement(reference_codes, runs, codes)
                if expose:
                    precisions = runner.precisions
                    localization = localize_results(first_reference, runs[0], candidate_model, precisions,
                                                     threshold=config["localize_threshold"])
                    runs = [{name: run[name] for name in outputs if name in run} for run in runs]
                del runner
                verdicts.append(judge.judge("emulated", runs))
                candidate_runs["emulated"] = [{name: run[name] for name in outputs if name in run} for run in runs]
            elif candidate == "tensorrt" and "engine" in inputs and _is_epcontext(inputs["engine"]):
                from trtpipe.trt.rtx.loader import EpUnavailable
                from trtpipe.trt.rtx.runner import run_epcontext

                try:
                    runs = run_epcontext(inputs["engine"], feeds)
                except EpUnavailable as missing:
                    notes.append(f"candidate tensorrt: the engine is a TensorRT-RTX EPContext model and cannot run "
                                 f"here: {missing.problem}; it runs {missing.fix}")
                    continue
                verdicts.append(judge.judge("tensorrt_rtx", runs))
                candidate_runs["tensorrt_rtx"] = runs
            elif candidate == "tensorrt" and "engine" in inputs:
                from trtpipe.trt import backend

                runs = (self._backend or backend()).run(inputs["engine"], feeds)
                verdicts.append(judge.judge("tensorrt", runs))
                candidate_runs["tensorrt"] = runs
            elif candidate == "tensorrt":
                notes.append("candidate tensorrt: no engine was built (no build stage, or the build was deferred)")
            else:
                notes.append(f"candidate {candidate}: unknown (use emulated or tensorrt)")
        notes += [note for verdict in verdicts for note in reference_nonfinite_notes(verdict)]
        report = {
            "passed": all(v.passed for v in verdicts),
            "candidates": [v.to_json() for v in verdicts],
            "iterations": len(feeds),
            # Flagged, not judged: pass/fail stands (trtpipe/validate/degenerate_data.py).
            "degenerate_data": degenerate_data(feeds, reference_model),
            "notes": notes,
            "localization": None,
            # The bounds each output was judged by (the ones set): the table shows each one's metric.
            "bounds": {name: {bound: value for bound, value in asdict(tolerances.for_output(name)).items()
                              if value is not None} for name in outputs},
        }
        quantized = _quantized_block(codes, agreement, config.get("float_model"), anchor, judge, feeds,
                                     reference_runs, candidate_runs, outputs)
        if quantized is not None:
            report["quantized"] = quantized
        failed = next((v for v in verdicts if not v.passed), None)
        outputs = {"report": "validation.json"}
        draw = bool(config["plot"]) and (failed is not None or bool(config.get("plot_passed")))
        if localization is None and ((failed is not None and config["localize"]) or draw):
            localization = _localize(reference_model, candidate_model, feeds[0], config)  # amplifiers explained
        elif localization is not None and failed is not None and config["localize"]:
            from trtpipe.validate.upstream_origins import explain_amplifiers

            explain_amplifiers(localization.findings(), reference_model, candidate_model, feeds[0], first_reference,
                               precisions)
        if failed is not None and config["localize"]:
            report["localization"] = localization.to_json()
        if draw:
            _plot(localization, out_dir / "accuracy.png", report["passed"])
            outputs["plot"] = "accuracy.png"
        (out_dir / "validation.json").write_text(json.dumps(report, indent=2) + "\n")
        (out_dir / "validation.txt").write_text(report_table(report))
        worst = "passed" if report["passed"] else "FAILED"
        return StageOutcome(
            outputs=outputs,
            summary=(f"{', '.join(v.name + (' passed' if v.passed else ' FAILED') for v in verdicts)}"
                     f" on {len(feeds)} input set(s)" if verdicts else f"no candidate to validate ({worst})")
            + (f", on degenerate data: {report['degenerate_data']}" if report["degenerate_data"] else ""),
            console_file="validation.txt",
            failed=None if failed is None else failure_message(report),
        )


def _quantized_block(codes, agreement, float_model, anchor, judge, feeds, reference_runs, candidate_runs,
                     outputs) -> dict | None:
    """`validation.json`'s `quantized`: for a model with QuantizeLinear codes or a `validate.float_model`,
    what the reference is, the criterion that judged (validate/anchored.py), the share of codes the
    emulation computes differently, and the comparisons against the float model (validate/float_model.py,
    validate/code_agreement.py). None otherwise, so a float model's report is as it was."""
    if not codes and not float_model:
        return None
    from trtpipe.validate.float_model import reference_note

    block = {"reference": reference_note(anchor, quantized=bool(codes)), "codes": agreement,
             "criterion": judge.to_json() if anchor else {"kind": "reference"}}
    if float_model:
        block["float_model"] = _float_model_comparisons(float_model, anchor, feeds, reference_runs, candidate_runs,
                                                        outputs)
    return block


def _float_model_comparisons(float_model, anchor, feeds, reference_runs, candidate_runs, outputs) -> dict:
    from trtpipe.cache.hashing import sha256_file
    from trtpipe.onnxmodel.onnx_io import load_model
    from trtpipe.numerics.reference import ReferenceRunner
    from trtpipe.validate.anchor_model import FLOAT_MODEL
    from trtpipe.validate.compare import compare_candidate
    from trtpipe.validate.float_model import float_comparisons, float_model_path

    path = float_model_path(float_model)
    if anchor is not None and anchor.source == FLOAT_MODEL:
        float_runs = anchor.runs  # run once, for the verdict
    else:
        runner = ReferenceRunner(load_model(path, weights_on_disk=True))
        float_runs = [runner.run(feeds_i) for feeds_i in feeds]
        del runner
    comparisons = float_comparisons(float_runs, reference_runs, candidate_runs, outputs, compare_candidate)
    return {"path": str(path), "sha256": sha256_file(path), "comparisons": comparisons}


def _is_epcontext(engine: Path) -> bool:
    from trtpipe.trt.rtx.runner import is_epcontext

    return is_epcontext(engine)


def _reference_names(outputs: list[str], promoted: dict[str, str], candidate_model, in_reference: set[str]) -> dict:
    """Candidate output -> the reference tensor it is compared with: a promoted `t__fp32` is `t`
    (promote_outputs' record); a tensor the reference does not compute because a Cast made it
    in the candidate (precision's `t/cast_to_fp32`, promoted by a regex) is the tensor that Cast
    reads, followed back through Casts until the reference has it. Decision: a Cast changes the
    type, not the value, so the reference's `t` is what that output must equal; before, such an
    output ended validate with a KeyError."""
    casts = {node.output[0]: node.input[0] for node in candidate_model.graph.node if node.op_type == "Cast"}
    names = {}
    for name in outputs:
        source = promoted.get(name, name)
        seen = set()
        while source not in in_reference and source in casts and source not in seen:
            seen.add(source)
            source = casts[source]
        if source != name:
            names[name] = source
    return names


def _by_candidate_name(reference: dict, outputs: list[str], promoted: dict[str, str]) -> dict:
    return {name: reference[promoted.get(name, name)] for name in outputs if promoted.get(name, name) in reference}


def _localize(reference_model, candidate_model, feeds, config):
    from trtpipe.validate.localize import localize

    return localize(reference_model, candidate_model, feeds, threshold=config["localize_threshold"])


def _plot(localization, path: Path, passed: bool) -> None:
    from trtpipe.validate.plot import plot_rows_from_localization, write_accuracy_plot

    verdict = "passed" if passed else "FAILED"
    write_accuracy_plot(path, plot_rows_from_localization(localization),
                        title=f"emulated candidate vs FP32 reference ({verdict})",
                        error_threshold=localization.threshold)
