"""The engine candidate of `validate`, with the TensorRT test double at the seam."""

from __future__ import annotations

import json

import onnx

from tests.precision.models import data_block, prepared
from tests.trt.fake_tensorrt import FakeTensorRTBackend
from trtpipe.stages.validate import ValidateAccuracy
from trtpipe.numerics.reference import ReferenceRunner

CONFIG = {"candidates": ["emulated", "tensorrt"], "tolerance": {"cosine_min": 0.999, "psnr_min": 40.0},
          "outputs": {}, "localize": True, "localize_threshold": 0.01, "plot": False, "min_compared": 0.5}


def run_validate(tmp_path, backend, with_engine: bool = True) -> dict:
    model = tmp_path / "model.onnx"
    onnx.save(prepared("nafnet"), str(model))
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"FAKE-ENGINE (test double)")
    inputs = {"model": model, "reference": model, **({"engine": engine} if with_engine else {})}
    out = tmp_path / "out"
    out.mkdir()
    outcome = ValidateAccuracy(backend=backend).run(inputs, {**CONFIG, "data": data_block("nafnet")}, out)
    return {"outcome": outcome, "report": json.loads((out / "validation.json").read_text())}


def test_engine_outputs_are_judged_like_any_candidate_with_fake_tensorrt(tmp_path):
    reference = ReferenceRunner(prepared("nafnet"))
    faithful = FakeTensorRTBackend(outputs=lambda feeds: reference.run(feeds))
    result = run_validate(tmp_path, faithful)
    names = [c["name"] for c in result["report"]["candidates"]]
    assert names == ["emulated", "tensorrt"] and result["report"]["passed"]
    assert faithful.runs == [(tmp_path / "model.engine", 2)]  # the same 2 input sets as the reference


def test_a_wrong_engine_fails_validation_with_fake_tensorrt(tmp_path):
    reference = ReferenceRunner(prepared("nafnet"))
    broken = FakeTensorRTBackend(outputs=lambda feeds: {k: v * 0 for k, v in reference.run(feeds).items()})
    result = run_validate(tmp_path, broken)
    tensorrt = next(c for c in result["report"]["candidates"] if c["name"] == "tensorrt")
    assert not tensorrt["passed"] and result["outcome"].failed.startswith("validation failed: tensorrt")


def test_without_an_engine_the_candidate_is_noted_not_faked(tmp_path):
    result = run_validate(tmp_path, FakeTensorRTBackend(), with_engine=False)
    assert [c["name"] for c in result["report"]["candidates"]] == ["emulated"]
    assert "no engine was built" in result["report"]["notes"][0]
