"""Tests that need real TensorRT and a CUDA GPU. Marked `tensorrt`; skipped, with the reason,
where TensorRT is not importable or no GPU is visible. On a GPU machine they build the
built-in models through the real stages, validate the engine against the FP32 reference,
and audit it."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.tensorrt
tensorrt = pytest.importorskip(
    "tensorrt", reason="needs TensorRT and an NVIDIA GPU: pip install tensorrt-cu13 (or tensorrt-cu12) on a GPU machine")

from omegaconf import OmegaConf  # noqa: E402

from tests.trt.tiny import write_inputs  # noqa: E402
from trtpipe.config.build_schema import BuildConfig  # noqa: E402
from trtpipe.errors import UserError  # noqa: E402
from trtpipe.stages.build import BuildEngine  # noqa: E402
from trtpipe.trt import backend  # noqa: E402

_AVAILABILITY = backend().availability()
if not _AVAILABILITY.available:
    pytest.skip(_AVAILABILITY.message(), allow_module_level=True)

MAJOR = int(tensorrt.__version__.split(".")[0])
RECIPES = {"transformer": "transformer_fp16", "nafnet": "nafnet_fp16", "mixed_precision": "mixed_precision"}


def mk(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_config(work, **changes) -> dict:
    values = OmegaConf.to_container(OmegaConf.structured(BuildConfig), resolve=True)
    return {**values, "cache_dir": str(work / "cache"), "audit": "warn", **changes}


def run_pipeline(recipe: str, work):
    """sanitize -> upgrade_opset -> precision -> build, as the runner would run them."""
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.preflight import compose_checked
    from trtpipe.config.store import register_configs
    from trtpipe.data import resolved_data
    from trtpipe.source import resolve_model_source
    from trtpipe.stages import STAGES

    register_configs()
    cfg = compose_checked(conf_dir(), [f"+recipe={recipe}"])
    data = resolved_data(cfg.data, cfg.model.builtin, work)
    artifacts = {"model": resolve_model_source(None, cfg.model.builtin, mk(work / "cache"), work)}
    for name in ("sanitize", "upgrade_opset", "precision"):
        stage = STAGES[name]
        config = OmegaConf.to_container(cfg[name], resolve=True)
        if stage.uses_data:
            config["data"] = data
        out = mk(work / name)
        outcome = stage().run({kind: artifacts[kind] for kind in stage.consumes}, config, out)
        artifacts.update({kind: out / file for kind, file in outcome.outputs.items()})
    outcome = BuildEngine().run({"model": artifacts["model"], "plan": artifacts["plan"]}, build_config(work),
                                mk(work / "build"))
    artifacts.update({kind: work / "build" / file for kind, file in outcome.outputs.items()})
    return cfg, data, artifacts, outcome


@pytest.fixture(scope="module", params=sorted(RECIPES))
def built(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(request.param)
    return (request.param, *run_pipeline(RECIPES[request.param], work), work)


def test_builtin_models_build_strongly_typed_and_are_audited(built):
    model, cfg, data, artifacts, outcome, work = built
    assert outcome.status == "ran", outcome.summary
    assert {"engine", "layer_info", "audit", "trtexec", "build_log"} <= set(outcome.outputs)
    audit = json.loads(artifacts["audit"].read_text())
    assert audit["inspector_schema"] == ("11.x" if MAJOR >= 11 else "10.x")
    plan = json.loads(artifacts["plan"].read_text())
    assert [row["node"] for row in audit["rows"]] == [n["name"] for n in plan["nodes"] if n["precision"] == "fp32"]
    assert all(row["verdict"] in ("ok", "mixed", "violation", "absent", "unknown") for row in audit["rows"])
    assert "<- in use" in artifacts["trtexec"].read_text()
    caches = list((work / "cache" / "timing_cache").glob("*.cache"))
    assert len(caches) == 1 and caches[0].stat().st_size > 0  # Polygraphy merged the timings into it


def test_the_engine_passes_validation_against_the_fp32_reference(built):
    from trtpipe.data import sample_feeds
    from trtpipe.onnxmodel.onnx_io import load_model
    from trtpipe.validate.compare import Tolerances, compare_candidate
    from trtpipe.numerics.reference import ReferenceRunner

    model, cfg, data, artifacts, outcome, work = built
    reference_model = load_model(artifacts["reference"])
    feeds = sample_feeds(reference_model, data)
    outputs = [value.name for value in reference_model.graph.output]
    reference = ReferenceRunner(reference_model)
    engine_runs = backend().run(artifacts["engine"], feeds)
    tolerances = Tolerances.from_mapping(OmegaConf.to_container(cfg.validate.tolerance, resolve=True),
                                         OmegaConf.to_container(cfg.validate.outputs, resolve=True))
    verdict = compare_candidate("tensorrt", [reference.run(f) for f in feeds], engine_runs, outputs, tolerances)
    assert verdict.passed, verdict.to_json()


def test_dynamic_shapes_build_with_profiles_and_run_in_the_profile_that_admits_the_feeds(tmp_path):
    import numpy as np

    inputs = write_inputs(tmp_path / "in", batch="batch")
    profiles = [{"x": {"min": [1, 16, 64], "opt": [2, 16, 64], "max": [2, 16, 64]}},
                {"x": {"min": [3, 16, 64], "opt": [4, 16, 64], "max": [8, 16, 64]}}]
    outcome = BuildEngine().run(inputs, build_config(tmp_path, profiles=profiles), mk(tmp_path / "out"))
    assert outcome.status == "ran"
    feeds = [{"x": np.ones((batch, 16, 64), np.float32)} for batch in (2, 5)]
    runs = backend().run(tmp_path / "out" / outcome.outputs["engine"], feeds)
    assert [run["y"].shape for run in runs] == [(2, 16, 64), (5, 16, 64)]
    with pytest.raises(UserError, match="fit no optimization profile"):
        backend().run(tmp_path / "out" / outcome.outputs["engine"], [{"x": np.ones((9, 16, 64), np.float32)}])


@pytest.mark.skipif(MAJOR >= 11, reason="constraints mode exists on TensorRT 10.x only")
def test_constraints_mode_sets_every_layer_of_each_node_on_10x(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    outcome = BuildEngine().run(inputs, build_config(tmp_path, precision_mode="constraints"), mk(tmp_path / "out"))
    assert outcome.status == "ran"
    assert "constraints mode: precision set on" in (tmp_path / "out" / outcome.outputs["build_log"]).read_text()


@pytest.mark.skipif(MAJOR < 11, reason="TensorRT 11.x refuses constraints mode")
def test_constraints_mode_is_refused_on_11x(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    with pytest.raises(UserError, match="needs TensorRT 10.x"):
        BuildEngine().run(inputs, build_config(tmp_path, precision_mode="constraints"), mk(tmp_path / "out"))
