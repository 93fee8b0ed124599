"""The large-model path (weights on disk, external data between stages) gives the in-memory path's results.

`EXTERNAL_DATA_THRESHOLD_BYTES` is lowered so that every stage output of the built-in
transformer (~0.4 MB) is written with external data, as a model over 256 MiB would be,
and every stage then reads its input with its weights on disk. The same pipeline is run
with the threshold as shipped (stage outputs inline, in memory) and from an inline
source model (nothing on disk at any point); all three must agree on every artifact.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.external_data_helper import uses_external_data

from trtpipe import api
from trtpipe.onnxmodel import onnx_io
from trtpipe.onnxmodel.onnx_io import save_model
from trtpipe.models import BUILTIN_INPUT_SPECS, BUILTIN_MODELS

# Whole pipeline runs over many models or trials: the full suite's tier, not the fast one.
pytestmark = pytest.mark.slow

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"
MODEL_STAGES = ("sanitize", "upgrade_opset", "precision")
SMALL_THRESHOLD_BYTES = 1000


def data_overrides() -> list[str]:
    """The built-in model's sample inputs, spelled out: with model.path set, no built-in defaults apply."""
    return [
        f"+data.inputs.{name}={{low:{spec['low']},high:{spec['high']},dtype:{spec['dtype']}}}"
        for name, spec in BUILTIN_INPUT_SPECS["transformer"].items()
    ]


def run_pipeline(tmp_path: Path, name: str, model_path: Path) -> api.RunResult:
    overrides = ["+recipe=transformer_fp16", STAGES, f"model.path={model_path}",
                 f"cache.dir={tmp_path / f'cache-{name}'}", *data_overrides()]
    try:
        return api.run(overrides, run_dir=tmp_path / f"run-{name}", start_dir=tmp_path)
    except api.PipelineFailed as failed:  # reported by the tests below, with the exit code and verdict
        return failed.result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs of the same pipeline: all on disk, the shipped threshold, and an inline source."""
    tmp_path = tmp_path_factory.mktemp("large_model_path")
    model = BUILTIN_MODELS["transformer"]()
    external_source = tmp_path / "external" / "transformer.onnx"
    inline_source = tmp_path / "inline" / "transformer.onnx"
    assert len(save_model(model, external_source, external_threshold_bytes=0)) == 2
    assert save_model(model, inline_source) == [inline_source]

    anchored: list[Path] = []
    real_anchor = onnx_io.anchor_external_tensor

    def recording_anchor(tensor, base_dir, model_path, *args):
        anchored.append(Path(model_path))
        return real_anchor(tensor, base_dir, model_path, *args)

    results, anchored_by_run = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        patch.setattr(onnx_io, "anchor_external_tensor", recording_anchor)
        with pytest.MonkeyPatch.context() as small:
            small.setattr(onnx_io, "EXTERNAL_DATA_THRESHOLD_BYTES", SMALL_THRESHOLD_BYTES)
            results["on_disk"] = run_pipeline(tmp_path, "on_disk", external_source)
        anchored_by_run["on_disk"] = list(anchored)
        anchored.clear()
        results["shipped"] = run_pipeline(tmp_path, "shipped", external_source)
        anchored_by_run["shipped"] = list(anchored)
        anchored.clear()
        results["in_memory"] = run_pipeline(tmp_path, "in_memory", inline_source)
        anchored_by_run["in_memory"] = list(anchored)
    assert onnx_io.EXTERNAL_DATA_THRESHOLD_BYTES == 256 << 20, "the patch must be undone"
    return results, anchored_by_run


def stage_files(result: api.RunResult, stage: str) -> list[str]:
    return sorted(path.name for path in (result.run_dir / stage).iterdir())


def test_every_run_succeeds_and_validation_passes(runs):
    results, _ = runs
    for name, result in results.items():
        assert result.exit_code == 0 and result.ok, name
        assert [s.name for s in result.stages] == ["sanitize", "upgrade_opset", "precision", "validate"], name
        assert {s.status for s in result.stages} == {"ran"}, name
        assert result.validation is not None and result.validation["passed"] is True, name
        assert [c["name"] for c in result.validation["candidates"]] == ["emulated"], name


def test_the_small_threshold_puts_every_stage_output_on_disk(runs):
    results, anchored = runs
    on_disk, shipped = results["on_disk"], results["shipped"]
    for stage in MODEL_STAGES:
        model_file = on_disk.artifact(stage, "model")
        assert model_file.name == "model.onnx"
        assert model_file.with_name("model.onnx.data").is_file(), stage
        stored = onnx.load(str(model_file), load_external_data=False)
        assert any(uses_external_data(t) for t in stored.graph.initializer), stage
        # And with the shipped threshold the same small model is written inline.
        assert "model.onnx.data" not in stage_files(shipped, stage), stage
    assert stage_files(on_disk, "precision") == ["model.onnx", "model.onnx.data", "precision_plan.json"]
    assert stage_files(shipped, "precision") == ["model.onnx", "precision_plan.json"]
    # Each model stage read its input with the weights on disk: the source and both stage outputs.
    assert len(set(anchored["on_disk"])) >= 3
    # Only the (external) source: checked at the start, read by sanitize through its snapshot.
    assert {path.name for path in anchored["shipped"]} == {"transformer.onnx"}
    assert anchored["in_memory"] == []


def test_precision_plans_are_equal(runs):
    results, _ = runs
    plans = {name: json.loads(result.artifact("precision", "plan").read_text()) for name, result in results.items()}
    assert plans["on_disk"] == plans["shipped"] == plans["in_memory"]


def assert_same_model_content(got: onnx.ModelProto, want: onnx.ModelProto, what: str) -> None:
    assert [n.SerializeToString() for n in got.graph.node] == [n.SerializeToString() for n in want.graph.node], what
    for field in ("input", "output", "value_info"):
        assert [v.SerializeToString() for v in getattr(got.graph, field)] == [
            v.SerializeToString() for v in getattr(want.graph, field)], (what, field)
    assert [t.name for t in got.graph.initializer] == [t.name for t in want.graph.initializer], what
    for tensor, expected in zip(got.graph.initializer, want.graph.initializer):
        assert (tensor.data_type, list(tensor.dims)) == (expected.data_type, list(expected.dims)), (what, tensor.name)
        got_values, want_values = numpy_helper.to_array(tensor), numpy_helper.to_array(expected)
        assert got_values.dtype == want_values.dtype, (what, tensor.name)
        np.testing.assert_array_equal(got_values, want_values, err_msg=f"{what}: {tensor.name}")
    assert list(got.opset_import) == list(want.opset_import) and got.ir_version == want.ir_version, what
    assert list(got.metadata_props) == list(want.metadata_props), what


@pytest.mark.parametrize("stage", MODEL_STAGES)
def test_stage_models_are_equal_in_content(runs, stage):
    results, _ = runs
    models = {name: onnx.load(str(result.artifact(stage, "model"))) for name, result in results.items()}
    assert_same_model_content(models["on_disk"], models["in_memory"], f"{stage}: on disk vs in memory")
    assert_same_model_content(models["shipped"], models["in_memory"], f"{stage}: shipped vs in memory")


def test_validation_measures_the_same_numbers(runs):
    results, _ = runs
    verdicts = {name: result.validation["candidates"] for name, result in results.items()}
    assert verdicts["on_disk"] == verdicts["shipped"] == verdicts["in_memory"]
