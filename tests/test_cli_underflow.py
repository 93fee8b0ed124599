"""The bottom of FP16's range from the command line (issue 21 item 1): an audio front end whose power
spectrum sits mostly below FP16's smallest subnormal passes the default config and transformer_fp16
(before the underflow check both runs ended with inf in the emulated candidate, exit 1)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.cli_helpers import run_trtpipe
from tests.precision.underflow_models import audio_front_end


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("underflow")
    model, feeds = audio_front_end()
    onnx.save(model, str(workdir / "audio.onnx"))
    np.savez(workdir / "audio.npz", **feeds)
    return workdir


@pytest.mark.parametrize("recipe", [None, "transformer_fp16"])
def test_a_quiet_audio_front_end_passes_validation(audio, recipe):
    overrides = [f"model.path={audio / 'audio.onnx'}", f"data.path={audio / 'audio.npz'}"]
    if recipe:
        overrides.insert(0, f"+recipe={recipe}")
    run = run_trtpipe(audio, *overrides, run_name=recipe or "default")
    assert run.code == 0, run.stdout + run.stderr
    stages = {s["name"]: s for s in run.manifest["stages"]}
    report = json.loads((run.run_dir / stages["validate"]["outputs"]["report"]["path"]).read_text())
    assert report["passed"]
    emulated = next(c for c in report["candidates"] if c["name"] == "emulated")
    assert emulated["outputs"]["y"]["nonfinite"] == 0
    plan = json.loads((run.run_dir / stages["precision"]["outputs"]["plan"]["path"]).read_text())
    nodes = {n["name"]: n for n in plan["nodes"]}
    assert nodes["log"]["precision"] == "fp32" and "flush to 0 in fp16" in nodes["log"]["reason"]
    assert nodes["stft"]["precision"] == "fp32" and "stored tensor (underflow)" in nodes["stft"]["reason"]
    assert plan["totals"]["low_precision_flop_share"] >= 0.9
