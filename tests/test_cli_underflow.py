"""The bottom of FP16's range from the command line (issue 21 item 1): an audio front end whose power
spectrum sits mostly below FP16's smallest subnormal, a normalisation of tiny activations and a
Reciprocal of small variances pass validation (before the underflow check every run ended with inf in
the emulated candidate, exit 1), with most FLOPs in FP16. So does the audio front end with its power
spectrum and Log inside a Loop body (issue 30 item 6: before, the check judged main-graph tensors only)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.cli_helpers import run_trtpipe
from tests.precision.underflow_body_models import audio_front_end_in_body
from tests.precision.underflow_models import audio_front_end, reciprocal_of_variances, tiny_normalisation

MODELS = {"audio": audio_front_end, "tiny_norm": tiny_normalisation, "reciprocal": reciprocal_of_variances,
          "audio_loop": lambda: audio_front_end_in_body("loop")}
# The node whose reason names the hazard, and the text it must hold.
PROTECTED = {"audio": ("stft", "change what log computes"), "tiny_norm": ("square", "tiny throughout"),
             "reciprocal": ("square", "tiny throughout"), "audio_loop": ("steps/body/log", "flush to 0 in fp16")}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("underflow")
    for name, build in MODELS.items():
        model, feeds = build()
        onnx.save(model, str(workdir / f"{name}.onnx"))
        np.savez(workdir / f"{name}.npz", **feeds)
    return workdir


@pytest.mark.parametrize("name, recipe", [("audio", None), ("audio", "transformer_fp16"),
                                          ("tiny_norm", None), ("reciprocal", None), ("audio_loop", None)])
def test_tiny_tensors_pass_validation(workdir, name, recipe):
    overrides = [f"model.path={workdir / name}.onnx", f"data.path={workdir / name}.npz"]
    if recipe:
        overrides.insert(0, f"+recipe={recipe}")
    run = run_trtpipe(workdir, *overrides, run_name=f"{name}-{recipe or 'default'}")
    assert run.code == 0, run.stdout + run.stderr
    stages = {s["name"]: s for s in run.manifest["stages"]}
    report = json.loads((run.run_dir / stages["validate"]["outputs"]["report"]["path"]).read_text())
    assert report["passed"]
    emulated = next(c for c in report["candidates"] if c["name"] == "emulated")
    assert emulated["outputs"]["y"]["nonfinite"] == 0
    plan = json.loads((run.run_dir / stages["precision"]["outputs"]["plan"]["path"]).read_text())
    nodes = {n["name"]: n for n in plan["nodes"]}
    node, text = PROTECTED[name]
    assert nodes[node]["precision"] == "fp32" and "stored tensor (underflow)" in nodes[node]["reason"]
    assert text in nodes[node]["reason"]
    assert plan["totals"]["low_precision_flop_share"] >= 0.9
