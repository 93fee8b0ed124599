"""The point of the stage: under a faithful FP16 evaluation, naive FP16 breaks the
built-in models and the default automatic rules do not."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.precision.models import data_block, precision_config, prepared
from trtpipe.data import sample_feeds
from trtpipe.stages.precision import PlanPrecision
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.reference import ReferenceRunner

NAIVE = {"respect_authored": False,
         "auto": {"max_abs": None, "constants": "saturate", "normalization": False, "softmax": False}}


def run_stage(tmp_path, name: str, fuse: bool = True, **config) -> onnx.ModelProto:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = tmp_path / "in.onnx"
    onnx.save(prepared(name, fuse), str(source))
    out = tmp_path / "out"
    out.mkdir()
    PlanPrecision().run({"model": source}, {**precision_config(**config), "data": data_block(name)}, out)
    return onnx.load(str(out / "model.onnx"))


def worst_relative_error(name: str, candidate: onnx.ModelProto) -> tuple[float, int]:
    reference = ReferenceRunner(prepared(name))
    emulated = EmulatedRunner(candidate)
    worst, nonfinite = 0.0, 0
    for feeds in sample_feeds(prepared(name), data_block(name, iterations=2)):
        ref, cand = reference.run(feeds), emulated.run(feeds)
        for output, expected in ref.items():
            got = np.asarray(cand[output], dtype=np.float64)
            nonfinite += int((~np.isfinite(got)).sum())
            scale = max(float(np.abs(expected).max()), 1e-6)
            worst = max(worst, float(np.nanmax(np.abs(got - expected))) / scale)
    return worst, nonfinite


@pytest.mark.parametrize("name", ["transformer", "nafnet"])
def test_naive_fp16_breaks_under_faithful_emulation(tmp_path, name):
    # Naive: everything FP16 on the graph as exported (no LayerNorm fusion: a fused
    # LayerNormalization computes its variance in FP32, in TensorRT as in the emulator).
    worst, nonfinite = worst_relative_error(name, run_stage(tmp_path, name, fuse=False, **NAIVE))
    assert nonfinite > 0 or worst > 0.05, (worst, nonfinite)


@pytest.mark.parametrize("name, tolerance", [("transformer", 0.01), ("nafnet", 0.01)])
def test_default_automatic_rules_stay_accurate(tmp_path, name, tolerance):
    # Also without fusion: the automatic rules alone must protect the decomposed norms.
    worst, nonfinite = worst_relative_error(name, run_stage(tmp_path, name, fuse=False))
    assert nonfinite == 0
    assert worst < tolerance, worst
    worst, nonfinite = worst_relative_error(name, run_stage(tmp_path / "fused", name))
    assert nonfinite == 0
    assert worst < tolerance, worst


def test_mixed_precision_output_is_a_valid_strongly_typed_model(tmp_path):
    import onnxruntime

    model = run_stage(tmp_path, "mixed_precision")
    onnx.checker.check_model(model, full_check=True)
    onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    casts = {n.name: n for n in model.graph.node if n.op_type == "Cast"}
    authored = [n for n in prepared("mixed_precision").graph.node if n.op_type == "Cast"]
    plan = json.loads((tmp_path / "out" / "precision_plan.json").read_text())
    removed = {c["name"] for c in plan["redundant_casts"]["casts"] if c["authored"]}
    # The author's Casts are all still there, unchanged, except those the plan lists as dead or exact no-ops.
    assert removed and all(n.name in removed or casts[n.name] == n for n in authored)
