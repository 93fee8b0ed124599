"""sanitize: load (external data too), infer shapes, fold constants, clean up, toposort, drop no-op Casts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from trtpipe.stages.base import Stage, StageOutcome


BIAS_REPORT = "bias_dequantize.json"


class SanitizeModel(Stage):
    name = "sanitize"
    # Part of the cache key: bump it when the same inputs and config give other outputs (CHANGELOG.md).
    version = "8"
    consumes = ("model",)
    # `reference`: the same file, kept by kind so validate compares against the sanitized
    # model even after later stages replace `model`.
    produces = ("model", "reference")
    tools = ("onnx", "onnxruntime", "onnx-graphsurgeon", "polygraphy", "numpy", "protobuf")

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        from trtpipe.graph.sanitize import sanitize_model  # heavy (onnx, polygraphy): only when running

        report = sanitize_model(inputs["model"], out_dir / "model.onnx", **config)
        before, after = report.get("nodes_before"), report.get("nodes_after")
        summary = f"{before} -> {after} nodes, {report.get('nodes_folded', 0)} folded"
        removed, kept = report.get("noop_casts_removed") or [], report.get("noop_casts_kept") or []
        if removed or kept:
            # A Cast to its input's own type is no precision decision (graph/passes/noop_casts.py); the names
            # are in the details, the line says how many and why any stayed.
            summary += f"; {len(removed)} no-op Cast(s) removed"
            if kept:
                summary += f" ({len(kept)} kept: {kept[0]['node']}: {kept[0]['reason']}" \
                    + (", ..." if len(kept) > 1 else "") + ")"
        renamed = report.get("nodes_renamed") or []
        if renamed:
            summary += f"; {len(renamed)} duplicate node name(s) made unique (" + ", ".join(
                f"{r['from']} -> {r['to']}" for r in renamed[:3]) + (", ..." if len(renamed) > 3 else "") + ")"
        biases = report.get("bias_dequantize_folded") or []
        if biases:
            # Named and explained on the line: the model's engine stays quantized because of it (bias_dequantize.py).
            summary += f"; {len(biases)} INT32 bias DequantizeLinear folded to FP32 (" + ", ".join(
                entry["node"] or entry["output"] for entry in biases[:3]) + (", ..." if len(biases) > 3 else "") \
                + "; with them TensorRT-RTX 1.7.1 built the weights FP32)"
        left = report.get("left_unfolded") or []
        if left:
            # What folding would have written, so the rule (sanitize.fold_growth_limit) can be judged from the line.
            summary += f"; {len(left)} left unfolded by the growth rule (" + ", ".join(
                f"{e['node'] or e['output']} {e['op_type']} {_size(e['output_bytes'])}" for e in left[:3]) \
                + (", ..." if len(left) > 3 else "") + ")"
        # The whole reason, never shortened: it says why this model lost a pass.
        summary += "".join(f"; {undone['pass']} undone for this model ({undone['reason']})"
                           for undone in report.get("undone", ()))
        if biases or report.get("bias_dequantize_kept"):
            # What was folded and why, and the INT32 DQs left with their reason, next to the model (not only
            # in the cache entry's record): the user reads why the engine's biases are FP32 constants.
            (out_dir / BIAS_REPORT).write_text(json.dumps(
                {key: report[key] for key in ("bias_dequantize_folded", "bias_dequantize_kept", "bias_dequantize_reason")
                 if key in report}, indent=2) + "\n")
        return StageOutcome(
            outputs={"model": "model.onnx", "reference": "model.onnx"},
            summary=summary,
            details=report,
        )


def _size(count: int | None) -> str:
    if count is None:
        return "size unknown"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{count} B"
